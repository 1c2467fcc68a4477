"""The cut-over of docs/migration.md as an operator runs it: a worker process writes a
conversation before the mirror and through it, then ``chatlayers migrate`` and ``chatlayers
verify --views`` (console script, subprocesses) to SQLite, PostgreSQL and Redis; records in their
place among the messages; a conversation a live writer keeps changing is handed to the
mirror (marked) instead of failing the run; errors are one line, and ``verify`` exits 2
when it cannot compare."""

from __future__ import annotations

import subprocess
import sys
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from storage import open_storage
from storage.abilities import ConversationRecord, RecordStorage, find_ability
from storage.cli import main
from storage.message import ChatKey, ChatMessage
from storage.migrate import copying, migrate, read_snapshot, record_side, verify
from storage.migrate.journal import Journal
from tests.cli.test_migrate import env, run, run_json
from tests.migrate.data import T0
from tests.paths import REPO

KEY = ChatKey("u", "s", "a")

# A worker of the deployment: saves turns ``start..start+n`` through ``url`` and fetches
# after each, as an agent router does (the summarize layer links each reply to its view
# with a provenance record).
WORKER = """
import sys, anyio
from storage import ChatKey, ChatMessage, open_storage

async def main(url, start, n):
    key = ChatKey("u", "s", "a")
    async with open_storage(url) as stack:
        for i in range(start, start + n):
            await stack.fetch(key)
            await stack.save(key, ChatMessage("user", f"question {i} about order A{i:04d}"))
            await stack.fetch(key)
            await stack.save(key, ChatMessage("assistant", f"answer {i}"))

anyio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
"""


def worker(url: str, start: int, n: int) -> None:
    subprocess.run(
        [sys.executable, "-c", WORKER, url, str(start), str(n)],
        env=env(),
        cwd=REPO,
        check=True,
        timeout=120,
        capture_output=True,
    )


def mirrored(secondary: str, primary: str) -> str:
    return f"summarize::mirror?secondary={urllib.parse.quote(secondary, safe='')}::{primary}"


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/new.db"
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        return f"{url}?prefix=cut{uuid.uuid4().hex[:8]}"
    dsn: str = request.getfixturevalue("postgres_dsn")
    return f"{dsn}?schema=cut_{uuid.uuid4().hex[:8]}"


def test_a_conversation_older_than_the_mirror_verifies_after_migrate(
    tmp_path: Path, new_store: str
) -> None:
    old = f"sqlite:///{tmp_path}/old.db"
    worker(f"summarize::{old}", 0, 6)  # before the mirror
    worker(mirrored(new_store, old), 6, 6)  # the new store gets these turns only
    first = run_json("migrate", "--from", old, "--to", new_store)
    assert first["rewritten"] == 1  # the new store held the later turns only
    assert first["records"] == 12  # one provenance record per reply
    for _ in range(2):  # and a second run finds nothing to do
        checked = run_json(
            "verify", "--from", f"summarize::{old}", "--to", f"summarize::{new_store}", "--views"
        )
        assert checked["equal"] is True, checked
        assert (checked["messages"], checked["records"]) == (24, 12)
        again = run_json("migrate", "--from", old, "--to", new_store)
        assert again["keys_changed"] == 0


async def _place(tmp_path: Path, name: str, record_after: int) -> Any:
    """Three messages with one record after ``record_after`` of them, in a SQLite file."""
    stack = open_storage(f"sqlite:///{tmp_path}/{name}.db")
    records = find_ability(stack, RecordStorage)
    assert records is not None
    record = ConversationRecord("note", {"n": 1}, "r-1", T0)
    for i in range(3):
        if i == record_after:
            await records.save_record(KEY, record)
        await stack.save(KEY, ChatMessage("user", f"m{i}", id=f"m{i}", created_at=T0))
    if record_after == 3:
        await records.save_record(KEY, record)
    return stack


@pytest.mark.anyio
async def test_a_record_out_of_its_place_is_named_and_put_back(tmp_path: Path) -> None:
    # The state an earlier migrate left after a mirror: same messages, same records, the
    # record after the wrong message (ids and data equal, so only its place differs).
    async with (
        await _place(tmp_path, "src", 1) as source,
        await _place(tmp_path, "dst", 3) as target,
    ):
        found = await verify(source, target)
        assert found.difference is not None
        assert found.difference.what == (
            "record 0 (id 'r-1') comes after 1 messages in the source, 3 in the target"
        )
        done = await migrate(source, target)
        assert done.rewritten == 1
        assert (await verify(source, target)).equal
        snap = await read_snapshot(record_side(target), KEY)
        assert snap.record_places() == [("r-1", 1)]


def test_a_conversation_written_all_through_the_copy_is_handed_to_the_mirror(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = f"sqlite:///{tmp_path}/old.db", f"sqlite:///{tmp_path}/new.db"
    worker(old, 0, 3)
    worker(f"mirror?secondary={urllib.parse.quote(new, safe='')}::{old}", 3, 2)
    # A hot conversation: a mirror writes it (primary, then secondary) between every read
    # of the target and the copy's conditional write to it.
    read = read_snapshot
    writes = 0

    async def read_then_a_mirror_writes(side: Any, key: ChatKey) -> Any:
        nonlocal writes
        snap = await read(side, key)
        if side.label.startswith(new):
            writes += 1
            message = ChatMessage("user", f"mirrored {writes}")
            for url in (old, new):
                async with open_storage(url) as store:
                    await store.save(key, message)
        return snap

    monkeypatch.setattr(copying, "read_snapshot", read_then_a_mirror_writes)
    monkeypatch.setattr(copying, "_PAUSE", 0.001)
    assert main(["migrate", "--from", old, "--to", new]) == 1
    out = capsys.readouterr().out
    assert "not copied: 1 conversations written all through the copy's attempts" in out
    assert "'u'/'s'/'a'" in out
    assert writes == copying._ATTEMPTS
    monkeypatch.undo()
    assert anyio.run(_marks, old, new) == [KEY]  # marked for the mirror of ``new`` ...
    # ... whose worker copies the conversation on its next write there
    worker(f"mirror?secondary={urllib.parse.quote(new, safe='')}::{old}", 5, 1)
    assert run("verify", "--from", old, "--to", new).returncode == 0
    again = run_json("migrate", "--from", old, "--to", new)
    assert (again["keys_changed"], again["busy"]) == (0, [])


async def _marks(primary: str, name: str) -> list[ChatKey | None]:
    async with open_storage(primary) as store:
        return [mark.key for mark in await Journal(store, name).marks()]


def test_errors_are_one_line_and_verify_exits_2_when_it_cannot_compare(tmp_path: Path) -> None:
    old = f"sqlite:///{tmp_path}/old.db"
    worker(f"summarize::{old}", 0, 2)
    gone = "postgresql://chat:s3cret@127.0.0.1:1/nowhere?connect_timeout=2"
    moved = run("migrate", "--from", old, "--to", gone, check=1)
    assert "Traceback" not in moved.stderr
    assert "ExceptionGroup" not in moved.stderr
    errors = [line for line in moved.stderr.splitlines() if line.startswith("chatlayers: error:")]
    assert len(errors) == 1
    assert "127.0.0.1" in errors[0]
    assert "s3cret" not in moved.stderr
    compared = run("verify", "--from", old, "--to", gone, check=2)
    assert "Traceback" not in compared.stderr
    assert run("verify", "--from", old, "--to", f"sqlite:///{tmp_path}/none.db", check=2)
    worker(f"summarize::sqlite:///{tmp_path}/other.db", 0, 1)
    assert run("verify", "--from", old, "--to", f"sqlite:///{tmp_path}/other.db", check=1)

"""``chatlayers migrate`` and ``chatlayers verify`` as a user runs them: the console script
in a subprocess, SQLite -> PostgreSQL and SQLite -> Redis on the shipped data (the same view
with no summarizer call from the new store), JSONL -> SQLite from a TOML file, a run killed
with SIGKILL and run again, idempotence, and a difference named with exit status 1."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from storage import open_storage
from storage.abilities import CheckpointStorage, find_ability
from storage.cli import main
from storage.cli.replay import REPLAY_URL
from storage.message import ChatKey
from storage.migrate import read_snapshot, record_side
from tests.migrate.data import conversation, seed
from tests.paths import REPO
from tests.servers import RedisServer

DATA = REPO / "examples" / "data"
SHIPPED = sorted(str(p) for p in DATA.glob("*.openai.jsonl"))
SECRET = "test-secret-0123456789abcdef"
VIEW = "summarize?trigger_tokens=4000::{}"  # the replay stack's summaries, no scrubber needed


def chatlayers() -> list[str]:
    script = Path(sys.executable).with_name("chatlayers")
    return [str(script)] if script.exists() else [sys.executable, "-m", "storage.cli"]


def env() -> dict[str, str]:
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join([str(REPO), out.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    out["CHATLAYERS_PII_SECRET"] = SECRET
    out.pop("CHATLAYERS_URL", None)
    out.pop("CHATLAYERS_CONFIG", None)
    return out


def run(*argv: str, check: int | None = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*chatlayers(), *argv], env=env(), capture_output=True, text=True, timeout=300, check=False
    )
    if check is not None:
        assert done.returncode == check, done.stdout + done.stderr
    return done


def run_json(*argv: str, check: int = 0) -> Any:
    return json.loads(run(*argv, "--json", check=check).stdout)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every shipped conversation replayed into SQLite through the default replay stack."""
    db = tmp_path_factory.mktemp("shipped") / "chatlayers.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CHATLAYERS_PII_SECRET", SECRET)
        url = REPLAY_URL.replace("sqlite:///chatlayers.db", f"sqlite:///{db}")
        assert main(["replay", "--url", url, *SHIPPED]) == 0
    return db


def _migrate_and_verify(source: str, target: str) -> dict[str, Any]:
    first: dict[str, Any] = run_json("migrate", "--from", source, "--to", target)
    assert first["keys"] == first["keys_changed"] == 146
    assert first["messages"] == first["messages_copied"] == 1768
    assert first["checkpoints"] == first["checkpoints_copied"] > 10
    again = run_json("migrate", "--from", source, "--to", target)
    assert (again["keys_changed"], again["messages_copied"], again["checkpoints_copied"]) == (
        0,
        0,
        0,
    )
    checked = run_json(
        "verify", "--from", VIEW.format(source), "--to", VIEW.format(target), "--views"
    )
    assert checked["equal"] is True
    assert checked["views"] == 146
    # every summary came across with its checkpoint: the same views, summaries first
    assert checked["summarized_views"] == first["checkpoints"]
    return first


def test_sqlite_to_postgres_on_the_shipped_data(shipped: Path, postgres_dsn: str) -> None:
    source = f"sqlite:///{shipped}"
    target = f"{postgres_dsn}?schema=mig_{uuid.uuid4().hex[:8]}"
    _migrate_and_verify(source, target)

    # a difference: one message gone from the target
    async def drop_one() -> ChatKey:
        async with open_storage(target) as store:
            side = record_side(store)
            key = (await side.keys())[3]
            snap = await read_snapshot(side, key)
            assert side.replaceable is not None
            await side.replaceable.replace(key, snap.messages[:-1])
            return key

    key = anyio.run(drop_one)
    done = run("verify", "--from", source, "--to", target, check=1)
    assert f"different: {key}: " in done.stdout
    assert "in the source" in done.stdout
    report = run_json("verify", "--from", source, "--to", target, check=1)
    assert report["difference"]["session_id"] == key.session_id
    again = run_json("migrate", "--from", source, "--to", target)
    # replace renumbered the messages and left the reply records before them all: not in
    # their places any more, so the conversation is written again (not one appended)
    assert again["rewritten"] == 1
    run("verify", "--from", source, "--to", target)


def test_sqlite_to_redis_on_the_shipped_data(shipped: Path, redis_url: str) -> None:
    _migrate_and_verify(f"sqlite:///{shipped}", f"{redis_url}?prefix=mig{uuid.uuid4().hex[:8]}")


def test_passwords_are_never_printed(
    redis_server_factory: type[RedisServer], tmp_path: Path
) -> None:
    server = redis_server_factory(tmp_path / "redis", password="pw-never-printed-42")
    server.start()
    source = f"sqlite:///{tmp_path}/empty.db"
    sqlite3.connect(tmp_path / "empty.db").close()
    done = run("migrate", "--from", source, "--to", server.url)
    assert "pw-never-printed" not in done.stdout + done.stderr
    assert ":***@" in done.stderr
    server.stop()
    failed = run("verify", "--from", source, "--to", server.url, check=2)  # could not compare
    assert "pw-never-printed" not in failed.stdout + failed.stderr


def test_jsonl_to_sqlite_from_a_toml_file(tmp_path: Path) -> None:
    async def fill() -> None:
        async with open_storage(f"jsonl://{tmp_path}/chats") as store:
            await seed(store)

    anyio.run(fill)
    config = tmp_path / "old.toml"
    config.write_text(f'[store]\nurl = "jsonl://{tmp_path}/chats"\n')
    target = f"sqlite:///{tmp_path}/new.db"
    done = run("migrate", "--from", str(config), "--to", target)
    lines = done.stdout.splitlines()
    assert lines[0] == "chatlayers migrate"
    assert lines[1].split() == ["keys", "messages", "checkpoints", "records", "seconds"]
    assert lines[2].split()[:7] == ["in", "the", "source", "3", "24", "2", "6"]
    assert lines[3].split()[:5] == ["copied", "3", "24", "2", "6"]
    assert "check it: chatlayers verify" in done.stderr
    assert run("verify", "--from", str(config), "--to", target).stdout.endswith("equal\n")


def _count(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet
        return 0


def _ids(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT message_id FROM messages")]


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """1,500 conversations of 8 messages in SQLite."""
    db = tmp_path_factory.mktemp("many") / "many.db"

    async def fill() -> None:
        async with open_storage(f"sqlite:///{db}") as store:
            for n in range(1500):
                await store.save_messages(ChatKey(f"user{n % 50}", f"s{n}", "a"), conversation(n))

    anyio.run(fill)
    return db, 1500 * 8


def test_a_run_killed_mid_way_finishes_when_run_again(
    many: tuple[Path, int], tmp_path: Path
) -> None:
    source, total = many
    target = tmp_path / "target.db"
    argv = ["migrate", "--from", f"sqlite:///{source}", "--to", f"sqlite:///{target}"]
    proc = subprocess.Popen(
        [*chatlayers(), *argv, "--batch", "3"],
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while _count(target) == 0 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    copied = _count(target)
    assert 0 < copied < total  # killed in the middle
    report = run_json(*argv)
    assert report["messages_copied"] == total - copied
    assert report["keys"] == 1500
    run("verify", "--from", f"sqlite:///{source}", "--to", f"sqlite:///{target}")
    ids = _ids(target)
    assert len(ids) == len(set(ids)) == total  # every message there once
    assert run_json(*argv)["messages_copied"] == 0


def test_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["migrate", "--from", "memory://"])
    assert exit_info.value.code == 2
    assert "--to" in capsys.readouterr().err
    code = main(["migrate", "--from", f"sqlite:///{tmp_path}/missing.db", "--to", "memory://"])
    assert code == 1
    assert not (tmp_path / "missing.db").exists()  # the source is never created
    assert main(["verify", "--url", "memory://", "--from", "memory://", "--to", "memory://"]) == 2
    assert "takes --from and --to" in capsys.readouterr().err


def test_a_checkpoint_a_rewind_dropped_counts_in_the_source_as_it_is_copied(
    tmp_path: Path,
) -> None:
    """A rewind to before what the summary covered drops the current checkpoint and keeps
    its versions: migrate copies them and counts them on both sides (it said 0 in the source
    and 1 copied)."""
    source, target = f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"
    key = ChatKey("ada", "trip", "support")

    async def summarize_then_rewind() -> None:
        async with open_storage(f"summarize?trigger_at=2&keep_last=1::{source}") as stack:
            await stack.save_messages(key, conversation(1, turns=6))
            assert (await stack.fetch(key))[0].is_summary
            await stack.rewind(key, (await stack.base.fetch(key))[1].id)
            checkpoints = find_ability(stack.base, CheckpointStorage)
            assert checkpoints is not None
            assert await checkpoints.load_checkpoint(key) is None

    anyio.run(summarize_then_rewind)
    report = run_json("migrate", "--from", source, "--to", target)
    assert report["checkpoints"] == report["checkpoints_copied"] == 1
    assert run_json("verify", "--from", source, "--to", target)["equal"] is True


def test_verify_views_writes_nothing_whatever_budget_the_stacks_name(
    shipped: Path, tmp_path: Path
) -> None:
    # The stacks name the default budget (trigger_at=20), not the one the summaries were made
    # with: serving their views must not summarize again into either store, or the next
    # verify finds checkpoints "made at different times".
    import shutil

    source, target = tmp_path / "src.db", tmp_path / "dst.db"
    shutil.copy(shipped, source)
    run_json("migrate", "--from", f"sqlite:///{source}", "--to", f"sqlite:///{target}")

    def checkpoints(db: Path) -> list[tuple[Any, ...]]:
        with sqlite3.connect(db) as conn:
            return sorted(conn.execute("SELECT * FROM checkpoints").fetchall())

    before = checkpoints(source), checkpoints(target)
    for _ in range(2):
        done = run(
            "verify", "--from", f"summarize::sqlite:///{source}",
            "--to", f"summarize::sqlite:///{target}", "--views",
        )  # fmt: skip
        assert done.stdout.strip().endswith("equal"), done.stdout
        assert "views compared: 146, 22 of them with a stored summary" in done.stdout
    assert (checkpoints(source), checkpoints(target)) == before
    run("verify", "--from", f"sqlite:///{source}", "--to", f"sqlite:///{target}")

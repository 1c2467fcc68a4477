"""JSONL store: atomic batches, damaged files, kill -9, compaction."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.message import ChatKey, ChatMessage
from storage.stores.jsonl import JsonlChatStorage
from tests.paths import REPO

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")
LOGGER = "storage.stores.jsonl"


def data_file(root: Path, key: ChatKey = KEY) -> Path:
    return root / key.user_id / key.session_id / f"{key.agent_id}.jsonl"


def texts(messages: list[ChatMessage]) -> list[str]:
    return [m.text for m in messages]


def skipped_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    return [m for m in messages if "skipped" in m]


async def fill(root: Path, batches: list[list[str]]) -> JsonlChatStorage:
    store = JsonlChatStorage(root)
    for batch in batches:
        await store.save_messages(KEY, [ChatMessage("user", t) for t in batch])
    return store


# --- the line format --------------------------------------------------------------------------


async def test_lines_are_json_records_with_seq_and_batch_marks(tmp_path: Path) -> None:
    store = await fill(tmp_path, [["one"], ["two", "three", "four"]])
    lines = data_file(tmp_path).read_bytes().split(b"\n")
    assert lines[-1] == b""
    header = json.loads(lines[0])  # the first line: the key's epoch, never a message
    assert header["hdr"] == 1
    assert len(header["epoch"]) == 32
    records = [json.loads(line) for line in lines[1:-1]]
    seqs = [r["seq"] for r in records]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == 4
    assert [r.get("to") for r in records] == [None, seqs[3], seqs[3], None]
    assert [r["m"]["content"] for r in records] == ["one", "two", "three", "four"]
    await store.aclose()


# --- torn and damaged files -------------------------------------------------------------------


async def test_torn_last_line_skipped_with_warning_and_next_append_on_fresh_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = await fill(tmp_path, [["m0"], ["m1"], ["m2"]])
    path = data_file(tmp_path)
    raw = path.read_bytes()
    last_start = raw.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(raw[: last_start + (len(raw) - last_start) // 2])  # cut m2 in the middle
    caplog.set_level(logging.WARNING, LOGGER)
    assert texts(await store.fetch(KEY)) == ["m0", "m1"]
    assert texts(await store.fetch(KEY, limit=5)) == ["m0", "m1"]
    assert texts(await store.fetch(KEY, limit=1)) == ["m1"]
    assert skipped_warnings(caplog)
    await store.save(KEY, ChatMessage("user", "m3"))
    assert texts(await store.fetch(KEY)) == ["m0", "m1", "m3"]
    assert texts(await store.fetch(KEY, limit=2)) == ["m1", "m3"]
    lines = path.read_bytes().split(b"\n")
    assert json.loads(lines[-2])["m"]["content"] == "m3"  # a whole line of its own
    assert lines[-3].endswith(b" torn")  # the torn fragment is marked, never valid again
    await store.aclose()


async def test_torn_message_can_be_saved_again(tmp_path: Path) -> None:
    store = JsonlChatStorage(tmp_path)
    kept, torn = ChatMessage("user", "kept"), ChatMessage("user", "torn")
    await store.save(KEY, kept)
    await store.save(KEY, torn)
    path = data_file(tmp_path)
    path.write_bytes(path.read_bytes()[:-10])
    await store.aclose()
    reopened = JsonlChatStorage(tmp_path)
    assert texts(await reopened.fetch(KEY)) == ["kept"]
    assert len(await reopened.save(KEY, torn)) == 1  # it was never stored: the retry stores it
    assert await reopened.save(KEY, kept) == []
    assert texts(await reopened.fetch(KEY)) == ["kept", "torn"]
    await reopened.aclose()


async def test_whole_record_missing_only_its_newline_is_kept(tmp_path: Path) -> None:
    store = await fill(tmp_path, [["m0"], ["m1"]])
    path = data_file(tmp_path)
    path.write_bytes(path.read_bytes()[:-1])
    assert texts(await store.fetch(KEY)) == ["m0", "m1"]
    assert texts(await store.fetch(KEY, limit=1)) == ["m1"]
    await store.save(KEY, ChatMessage("user", "m2"))
    assert texts(await store.fetch(KEY)) == ["m0", "m1", "m2"]
    assert all(json.loads(line) for line in path.read_bytes().splitlines())
    await store.aclose()


@pytest.mark.parametrize("content", [b"", b"\x00" * 4096, b"\x00" * 10 + b"\n" + b"\x00" * 7])
async def test_empty_and_nul_files(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = data_file(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    caplog.set_level(logging.WARNING, LOGGER)
    async with JsonlChatStorage(tmp_path) as store:
        assert await store.fetch(KEY) == []
        assert await store.fetch(KEY, limit=3) == []
        assert await store.fetch_all_chats("u", "s") == []
        assert bool(skipped_warnings(caplog)) == bool(content)
        await store.save_messages(KEY, [ChatMessage("user", "after"), ChatMessage("user", "crash")])
        assert texts(await store.fetch(KEY)) == ["after", "crash"]
        assert texts(await store.fetch(KEY, limit=1)) == ["crash"]
        assert path.read_bytes().startswith(content)  # nothing before is rewritten


async def test_unreadable_line_in_the_middle_is_skipped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = await fill(tmp_path, [["m0"], ["m1"]])
    path = data_file(tmp_path)
    with path.open("ab") as f:
        f.write(b'{"seq":1,"v":1,"id":"x","at":"not a date","m":{}}\nnot json at all\n')
    await store.save(KEY, ChatMessage("user", "m2"))
    caplog.set_level(logging.WARNING, LOGGER)
    assert texts(await store.fetch(KEY)) == ["m0", "m1", "m2"]
    assert texts(await store.fetch(KEY, limit=3)) == ["m0", "m1", "m2"]
    assert len(skipped_warnings(caplog)) == 2
    caplog.clear()
    await store.fetch(KEY)
    assert skipped_warnings(caplog) == []  # each damaged line is reported once per process
    await store.aclose()


# --- batches are atomic -----------------------------------------------------------------------


async def test_batch_cut_short_is_invisible_and_can_be_retried(tmp_path: Path) -> None:
    store = JsonlChatStorage(tmp_path)
    await store.save(KEY, ChatMessage("user", "before"))
    batch = [ChatMessage("user", f"b{i}") for i in range(4)]
    await store.save_messages(KEY, batch)
    path = data_file(tmp_path)
    raw = path.read_bytes()
    # Cut after the batch's third line: three whole lines of a four-line batch remain.
    cut = 0
    for _ in range(4):
        cut = raw.index(b"\n", cut) + 1
    path.write_bytes(raw[:cut])
    await store.aclose()
    for limit in (None, 1, 2, 10):
        async with JsonlChatStorage(tmp_path) as reader:
            assert texts(await reader.fetch(KEY, limit=limit)) == ["before"], limit
            assert texts([m.message for m in await reader.fetch_all_chats("u", "s")]) == ["before"]
    async with JsonlChatStorage(tmp_path) as store2:
        assert texts(await store2.save_messages(KEY, batch)) == ["b0", "b1", "b2", "b3"]
        assert texts(await store2.fetch(KEY)) == ["before", "b0", "b1", "b2", "b3"]
        assert texts(await store2.fetch(KEY, limit=3)) == ["b1", "b2", "b3"]


async def test_batch_being_written_is_invisible(tmp_path: Path) -> None:
    """A reader (lock-free) sees a batch's first lines while the writer is mid-write."""
    store = JsonlChatStorage(tmp_path)
    await store.save(KEY, ChatMessage("user", "before"))
    await store.save_messages(KEY, [ChatMessage("user", f"b{i}") for i in range(3)])
    path = data_file(tmp_path)
    raw = path.read_bytes()
    first_line_end = raw.index(b"\n", raw.index(b"\n") + 1) + 1  # the header, then "before"
    for cut in range(first_line_end, len(raw) - 1):
        path.write_bytes(raw[:cut])
        assert texts(await store.fetch(KEY)) == ["before"], cut
        assert texts(await store.fetch(KEY, limit=2)) == ["before"], cut
    path.write_bytes(raw)
    assert texts(await store.fetch(KEY, limit=2)) == ["b1", "b2"]
    await store.aclose()


async def test_torn_tail_not_reported_while_a_writer_holds_the_lock(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = await fill(tmp_path, [["m0"], ["m1"]])
    path = data_file(tmp_path)
    path.write_bytes(path.read_bytes()[:-5])
    caplog.set_level(logging.WARNING, LOGGER)
    fd = os.open(path.parent / ".lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as a writer in another process would
        assert texts(await store.fetch(KEY)) == ["m0"]
        assert skipped_warnings(caplog) == []
    finally:
        os.close(fd)
    assert texts(await store.fetch(KEY)) == ["m0"]
    assert len(skipped_warnings(caplog)) == 1
    await store.aclose()


# --- compaction -------------------------------------------------------------------------------


async def test_compact_drops_damage_atomically_and_keeps_lines_byte_exact(tmp_path: Path) -> None:
    store = await fill(tmp_path, [["m0"], ["m1", "m2"]])
    path = data_file(tmp_path)
    good = path.read_bytes()
    with path.open("ab") as f:
        f.write(b"garbage\n" + good.splitlines(keepends=True)[2])  # an orphaned batch line
    await store.save(KEY, ChatMessage("user", "m3"))
    with path.open("ab") as f:
        f.write(b'{"seq":99,"v":1,"id":"torn')
    before = await store.fetch(KEY)
    assert texts(before) == ["m0", "m1", "m2", "m3"]
    inode = path.stat().st_ino
    result = await store.compact(KEY)
    assert result is not None
    assert (result.kept, result.dropped) == (4, 3)
    assert result.bytes_after < result.bytes_before
    assert path.stat().st_ino != inode  # replaced by rename, never rewritten in place
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    compacted = path.read_bytes()
    assert compacted.startswith(good)
    assert compacted.count(b"\n") == 5  # the header (epoch kept) and the four messages
    assert compacted.endswith(b"\n")
    assert sorted(p.name for p in path.parent.iterdir()) == [".lock", "a.jsonl"]
    assert await store.fetch(KEY) == before
    again = await store.compact(KEY)
    assert again is not None
    assert again.dropped == 0
    assert path.read_bytes() == compacted
    await store.save(KEY, ChatMessage("user", "m4"))
    assert texts(await store.fetch(KEY, limit=2)) == ["m3", "m4"]
    assert await store.compact(ChatKey("nobody", "s", "a")) is None
    await store.aclose()


async def test_compact_all_and_other_instances_notice(tmp_path: Path) -> None:
    writer = JsonlChatStorage(tmp_path)
    keys = [ChatKey("u", "s", "a"), ChatKey("u", "s", "b"), ChatKey("v", "t", "c")]
    kept = ChatMessage("user", "kept")
    for key in keys:
        await writer.save(key, kept)
        with data_file(tmp_path, key).open("ab") as f:
            f.write(b"junk\n")
        await writer.save(key, ChatMessage("user", "after"))
    compactor = JsonlChatStorage(tmp_path)
    results = await compactor.compact_all()
    assert sorted((Path(r.path).name, r.kept, r.dropped) for r in results) == [
        ("a.jsonl", 2, 1),
        ("b.jsonl", 2, 1),
        ("c.jsonl", 2, 1),
    ]
    for key in keys:
        # The writer's cached view of the file is stale: it must notice the new file.
        assert await writer.save(key, kept) == []
        await writer.save(key, ChatMessage("user", "last"))
        assert texts(await compactor.fetch(key)) == ["kept", "after", "last"]
    await writer.aclose()
    await compactor.aclose()


async def test_leftovers_of_crashed_rewrites_are_ignored_and_cleaned(tmp_path: Path) -> None:
    store = await fill(tmp_path, [["m0"], ["m1", "m2"]])
    head = await store.head(KEY)
    summary = ChatMessage("system", "s", metadata={"chatlayers": {"summary": True}})
    made = SummaryCheckpoint((summary,), head.last_seq, head.epoch, "t", datetime.now(UTC))
    assert await store.save_checkpoint(KEY, made, expected_version=0) is not None
    session = data_file(tmp_path).parent
    # What a kill -9 leaves in the middle of a replace, a checkpoint or a lease write: the
    # temporary file, half written, never renamed.
    (session / ".a.jsonl.tmp").write_bytes(b'{"hdr":1,"epoch":"ab"}\n{"seq":1,"v":1,"id"')
    (session / ".a.ckpt.tmp").write_bytes(b'{"v":1,"version":9')
    (session / ".a.lease.tmp").write_bytes(b'{"owner":')
    async with JsonlChatStorage(tmp_path) as again:
        assert texts(await again.fetch(KEY)) == ["m0", "m1", "m2"]
        assert await again.head(KEY) == attrs.evolve(head, checkpoint_version=1)
        loaded = await again.load_checkpoint(KEY)
        assert loaded is not None
        assert loaded.version == 1
        assert await again.acquire_lease(KEY, "w", 5)
        await again.replace(KEY, [ChatMessage("user", "new")])
        assert texts(await again.fetch(KEY)) == ["new"]
        assert not (session / ".a.jsonl.tmp").exists()  # the rewrite reused and renamed it
        await again.delete(KEY)
        assert not session.exists()  # every leftover went with the key
    await store.aclose()


# --- kill -9 ----------------------------------------------------------------------------------

KILL_WORKER = r"""
import os, sys, anyio
from storage.message import ChatKey, ChatMessage
from storage.stores.jsonl import JsonlChatStorage

root, acks, round_no = sys.argv[1], sys.argv[2], sys.argv[3]

async def main():
    store = JsonlChatStorage(root, fsync="never")
    key = ChatKey("u", "s", "a")
    fd = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    n = 0
    while True:
        size = 1 + n % 5
        big = "x" * (3000 * (n % 7))  # some writes span several pages
        batch = [ChatMessage("user", f"r{round_no}-b{n}-{i} {big}") for i in range(size)]
        await store.save_messages(key, batch)
        # acknowledged: the save returned
        os.write(fd, (" ".join(m.id for m in batch) + "\n").encode())
        n += 1

anyio.run(main)
"""


def run_until_acked(root: Path, acks: Path, round_no: int, min_acks: int) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", KILL_WORKER, str(root), str(acks), str(round_no)],
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if acks.exists() and acks.read_bytes().count(b"\n") >= min_acks:
                break
            if proc.poll() is not None:
                raise AssertionError(f"worker exited early with {proc.returncode}")
            time.sleep(0.01)
        else:
            raise AssertionError("worker acknowledged too few saves")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


@pytest.mark.slow
async def test_sigkill_mid_loop_loses_nothing_acknowledged(tmp_path: Path) -> None:
    root, acks = tmp_path / "store", tmp_path / "acks"
    total = 0
    for round_no in range(4):
        total += 40
        run_until_acked(root, acks, round_no, total)
        acked = [line.split() for line in acks.read_text().splitlines() if line.strip()]
        total = len(acked)
        async with JsonlChatStorage(root) as store:
            fetched = await store.fetch(KEY)
            ids = [m.id for m in fetched]
            assert len(ids) == len(set(ids))
            present = set(ids)
            for batch in acked:
                assert present.issuperset(batch)
            # every batch is whole or absent, acknowledged or not
            by_batch: dict[str, list[str]] = {}
            for m in fetched:
                if "-after-" in m.text:
                    continue
                by_batch.setdefault(m.text.split()[0].rsplit("-", 1)[0], []).append(m.text)
            for name, members in by_batch.items():
                n = int(name.split("-b")[1])
                assert len(members) == 1 + n % 5, name
            tail = await store.fetch(KEY, limit=7)
            assert tail == fetched[-len(tail) :]
            assert len(await store.save(KEY, ChatMessage("user", f"r{round_no}-after-0"))) == 1


# --- every reader agrees on any damaged file ---------------------------------------------------

damage = st.lists(
    st.tuples(
        st.sampled_from(["truncate", "garbage", "drop-line", "copy-line", "nul-run", "append"]),
        st.integers(min_value=0, max_value=10**6),
        st.integers(min_value=1, max_value=4),
    ),
    max_size=4,
)


def damaged(raw: bytes, op: str, where: int) -> bytes:
    lines = raw.split(b"\n")
    at = where % (len(lines) or 1)
    if op == "truncate":
        return raw[: where % (len(raw) + 1)]
    if op == "garbage":
        return b"\n".join([*lines[:at], b'{"seq":7,"v":1,"id":"g","m"', *lines[at:]])
    if op == "drop-line":
        return b"\n".join(lines[:at] + lines[at + 1 :])
    if op == "copy-line":
        return b"\n".join([*lines[: at + 1], lines[at], *lines[at + 1 :]])
    start = where % (len(raw) + 1)
    return raw[:start] + b"\x00" * 9 + raw[start + 9 :]


@given(batches=st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=8), ops=damage)
@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
async def test_readers_writer_and_compaction_agree_on_damaged_files(
    anyio_backend: str, batches: list[int], ops: list[tuple[str, int, int]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = data_file(root)
        originals: list[ChatMessage] = []
        counter = 0

        async def append(sizes: list[int]) -> None:
            nonlocal counter
            async with JsonlChatStorage(root, fsync="never") as writer:
                for size in sizes:
                    batch = [
                        ChatMessage("user", f"m{n}", id=f"id{n}")
                        for n in range(counter, counter + size)
                    ]
                    counter += size
                    originals.extend(batch)
                    await writer.save_messages(KEY, batch)
                    if size % 2:  # records between batches: every reader passes over them
                        await writer.save_record(KEY, ConversationRecord("r", {"n": counter}))

        await append(batches)
        for op, where, size in ops:
            if op == "append":
                await append([size])
            else:
                path.write_bytes(damaged(path.read_bytes(), op, where))

        async with JsonlChatStorage(root, cache_bytes=0) as reader:
            full = await reader.fetch(KEY)
            for limit in range(1, len(full) + 3):
                assert await reader.fetch(KEY, limit=limit) == full[-limit:], limit
            tail = await reader.fetch_since(KEY, 0)
            assert list(tail.messages) == full
            assert (await reader.head(KEY)).last_seq == (tail.seqs[-1] if full else 0)
            merged = await reader.fetch_all_chats("u", "s")
            assert [m.message for m in merged] == full
        present = {m.id for m in full}
        if all(op in ("truncate", "append") for op, _, _ in ops):
            # Crashes damage only the tail: every batch is whole or absent. (An edit inside a
            # batch, in the middle of the file, can leave its last line standing alone.)
            at = 0
            for size in [*batches, *(s for op, _, s in ops if op == "append")]:
                ids = {m.id for m in originals[at : at + size]}
                at += size
                assert ids <= present or not ids & present
        # compaction keeps exactly what readers see
        async with JsonlChatStorage(root) as compactor:
            await compactor.compact(KEY)
            assert await compactor.fetch(KEY) == full
        # the writer's duplicate check agrees with readers: a save stores exactly the missing
        async with JsonlChatStorage(root) as writer:
            for message in originals:
                stored = await writer.save(KEY, message)
                assert (stored == []) == (message.id in present), message.id
            assert {m.id for m in await writer.fetch(KEY)} == {m.id for m in originals}

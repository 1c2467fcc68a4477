"""JSONL store: every ability of ``storage.abilities``, on the files themselves and across store
instances."""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from storage.abilities import ConversationRecord, Head, SummaryCheckpoint
from storage.errors import ConflictError, InvalidArgumentError, InvalidMessageError
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.jsonl import JsonlChatStorage
from storage.testing.harness import FakeClock

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def data_file(root: Path, key: ChatKey = KEY) -> Path:
    return root / key.user_id / key.session_id / f"{key.agent_id}.jsonl"


def texts(messages: list[ChatMessage] | tuple[ChatMessage, ...]) -> list[str]:
    return [m.text for m in messages]


def summary(text: str) -> ChatMessage:
    return ChatMessage("system", text, metadata={"chatlayers": {"summary": True}})


def seqs_in_file(path: Path) -> list[int]:
    return [json.loads(line)["seq"] for line in path.read_bytes().splitlines()[1:]]


# --- SequencedStorage ------------------------------------------------------------------------


async def test_head_reads_the_last_line_and_the_header(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        assert await store.head(KEY) == Head(0, "", 0)
        await store.save_messages(KEY, [ChatMessage("user", f"m{i}") for i in range(3)])
        head = await store.head(KEY)
        header = json.loads(data_file(tmp_path).read_bytes().splitlines()[0])
        assert head == Head(seqs_in_file(data_file(tmp_path))[-1], header["epoch"], 0)
        await store.save(KEY, ChatMessage("user", "m3"))
        later = await store.head(KEY)
        assert later.epoch == head.epoch
        assert later.last_seq > head.last_seq
        assert later.version != head.version
        await store.save_record(KEY, ConversationRecord("status", {"s": 1}))
        assert await store.head(KEY) == later  # a record is not a raw message


async def test_head_never_sees_a_batch_being_written(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        await store.save(KEY, ChatMessage("user", "before"))
        before = await store.head(KEY)
        await store.save_messages(KEY, [ChatMessage("user", f"b{i}") for i in range(3)])
        after = await store.head(KEY)
    path = data_file(tmp_path)
    raw = path.read_bytes()
    lines = raw.splitlines(keepends=True)
    for cut in range(len(b"".join(lines[:2])), len(raw) - 1, 7):
        path.write_bytes(raw[:cut])
        async with JsonlChatStorage(tmp_path, cache_bytes=0) as reader:
            assert await reader.head(KEY) == before, cut
            tail = await reader.fetch_since(KEY, 0)
            assert texts(tail.messages) == ["before"]
    path.write_bytes(raw)
    async with JsonlChatStorage(tmp_path) as reader:
        assert await reader.head(KEY) == after


async def test_fetch_since_reads_the_tail_in_one_snapshot(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        await store.save_messages(KEY, [ChatMessage("user", f"m{i}") for i in range(5)])
        await store.save_record(KEY, ConversationRecord("ui", {"tab": 2}))
        await store.save(KEY, ChatMessage("assistant", "m5"))
        everything = await store.fetch_since(KEY, 0)
        assert texts(everything.messages) == [f"m{i}" for i in range(6)]
        assert list(everything.seqs) == sorted(everything.seqs)
        assert everything.head == await store.head(KEY)
        middle = everything.seqs[3]
        tail = await store.fetch_since(KEY, middle)
        assert texts(tail.messages) == ["m4", "m5"]
        assert tail.seqs == everything.seqs[4:]
        assert tail.head == everything.head
        caught_up = await store.fetch_since(KEY, everything.head.last_seq)
        assert caught_up.messages == ()
        assert caught_up.head == everything.head  # the head is known even with no new message
        assert await store.fetch_since(ChatKey("u", "s", "none"), 0) == (
            await store.fetch_since(ChatKey("u", "s", "none"), 3)
        )
        for bad in (-1, 1.0, True, None):
            with pytest.raises(InvalidArgumentError):
                await store.fetch_since(KEY, bad)  # type: ignore[arg-type]


async def test_fetch_since_far_behind_reads_the_whole_rest(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        for chunk in range(6):
            await store.save_messages(
                KEY, [ChatMessage("user", f"m{chunk * 100 + i}") for i in range(100)]
            )
        everything = await store.fetch_since(KEY, 0)
        assert len(everything.messages) == 600
        behind = await store.fetch_since(KEY, everything.seqs[9])
        assert texts(behind.messages) == [f"m{i}" for i in range(10, 600)]
        assert behind.seqs == everything.seqs[10:]


async def test_a_file_without_header_has_a_stable_epoch(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        await store.save_messages(KEY, [ChatMessage("user", "a"), ChatMessage("user", "b")])
    path = data_file(tmp_path)
    raw = path.read_bytes()
    path.write_bytes(raw[raw.index(b"\n") + 1 :])  # as written before headers existed
    async with JsonlChatStorage(tmp_path) as store:
        head = await store.head(KEY)
        assert head.epoch == f"s{json.loads(data_file(tmp_path).read_bytes().split()[0])['seq']}"
        await store.save(KEY, ChatMessage("user", "c"))
        assert (await store.head(KEY)).epoch == head.epoch
        await store.compact(KEY)
        assert (await store.head(KEY)).epoch == head.epoch
        await store.replace(KEY, [ChatMessage("user", "new")])
        assert (await store.head(KEY)).epoch not in ("", head.epoch)


async def test_epoch_changes_on_delete_replace_and_purge(tmp_path: Path) -> None:
    clock = FakeClock(T0.timestamp())
    async with JsonlChatStorage(tmp_path, retention=60, clock=clock) as store:
        seen = set()
        await store.save(KEY, ChatMessage("user", "x", created_at=T0))
        seen.add((await store.head(KEY)).epoch)
        await store.delete(KEY)
        assert await store.head(KEY) == Head(0, "", 0)
        await store.save(KEY, ChatMessage("user", "x", created_at=T0))
        seen.add((await store.head(KEY)).epoch)
        await store.replace(KEY, [ChatMessage("user", "y", created_at=T0)])
        seen.add((await store.head(KEY)).epoch)
        await store.save(KEY, ChatMessage("user", "z", created_at=T0 + timedelta(minutes=5)))
        assert await store.purge(now=T0 + timedelta(minutes=2)) == 1
        seen.add((await store.head(KEY)).epoch)
        assert len(seen) == 4
        assert "" not in seen


# --- CheckpointStorage -----------------------------------------------------------------------


async def test_checkpoint_compare_and_set_across_instances(tmp_path: Path) -> None:
    a, b = JsonlChatStorage(tmp_path), JsonlChatStorage(tmp_path)
    await a.save_messages(KEY, [ChatMessage("user", f"m{i}") for i in range(4)])
    head = await b.head(KEY)
    made = SummaryCheckpoint((summary("first"),), head.last_seq, head.epoch, "test", T0)
    stored = await a.save_checkpoint(KEY, made, expected_version=0)
    assert stored is not None
    assert stored.version == 1
    assert (await b.head(KEY)).checkpoint_version == 1  # the other instance sees it at once
    loaded = await b.load_checkpoint(KEY)
    assert loaded == stored
    assert loaded is not None
    assert texts(loaded.messages) == ["first"]
    assert loaded.messages[0].created_at is not None
    # b lost the race: its expected version is stale
    assert await b.save_checkpoint(KEY, made, expected_version=0) is None
    second = await b.save_checkpoint(
        KEY,
        SummaryCheckpoint((summary("second"),), head.last_seq, head.epoch, "t", T0),
        expected_version=1,
    )
    assert second is not None
    assert second.version == 2
    assert texts((await a.load_checkpoint(KEY)).messages) == ["second"]  # type: ignore[union-attr]
    session = data_file(tmp_path).parent
    assert sorted(p.name for p in session.iterdir()) == [".lock", "a.ckpt", "a.ckpts", "a.jsonl"]
    assert (session / "a.ckpt").stat().st_mode & 0o777 == 0o600
    assert (session / "a.ckpts").stat().st_mode & 0o777 == 0o600  # every version, kept
    # never a message
    assert texts(await a.fetch(KEY)) == [f"m{i}" for i in range(4)]
    assert len(await a.fetch_all_chats("u", "s")) == 4
    await a.aclose()
    await b.aclose()


async def test_checkpoint_refused_for_another_epoch_or_an_unheld_seq(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        cp = SummaryCheckpoint((summary("s"),), 1, "e", "t", T0)
        assert await store.save_checkpoint(KEY, cp, expected_version=0) is None  # no key
        await store.save_messages(KEY, [ChatMessage("user", "a"), ChatMessage("user", "b")])
        head = await store.head(KEY)
        for covers_to, epoch in ((head.last_seq + 1, head.epoch), (head.last_seq, "other")):
            cp = SummaryCheckpoint((summary("s"),), covers_to, epoch, "t", T0)
            assert await store.save_checkpoint(KEY, cp, expected_version=0) is None
        good = SummaryCheckpoint((summary("s"),), head.last_seq, head.epoch, "t", T0)
        assert await store.save_checkpoint(KEY, good, expected_version=0) is not None
        await store.replace(KEY, [ChatMessage("user", "new")])
        assert not (data_file(tmp_path).parent / "a.ckpt").exists()  # dropped with the epoch
        assert await store.load_checkpoint(KEY) is None
        assert (await store.head(KEY)).checkpoint_version == 0
        bad = SummaryCheckpoint((ChatMessage("user", "x"),), head.last_seq, head.epoch, "t", T0)
        with pytest.raises(InvalidMessageError, match="summary"):
            await store.save_checkpoint(KEY, bad, expected_version=0)


async def test_a_damaged_or_stale_checkpoint_counts_as_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        await store.save(KEY, ChatMessage("user", "a"))
        head = await store.head(KEY)
        cp = SummaryCheckpoint((summary("s"),), head.last_seq, head.epoch, "t", T0)
        assert await store.save_checkpoint(KEY, cp, expected_version=0) is not None
        sidecar = data_file(tmp_path).parent / "a.ckpt"
        sidecar.write_bytes(sidecar.read_bytes()[:-20])
        caplog.set_level(logging.WARNING, "storage.stores.jsonl")
        assert await store.load_checkpoint(KEY) is None
        assert (await store.head(KEY)).checkpoint_version == 0
        assert any("checkpoint" in r.getMessage() for r in caplog.records)
        again = await store.save_checkpoint(KEY, cp, expected_version=0)
        assert again is not None
        assert again.version == 1


async def test_leases_exclude_other_instances_and_expire_on_the_clock(tmp_path: Path) -> None:
    clock = FakeClock()
    a = JsonlChatStorage(tmp_path, clock=clock)
    b = JsonlChatStorage(tmp_path, clock=clock)
    assert await a.acquire_lease(KEY, "worker-a", 10)
    assert not await b.acquire_lease(KEY, "worker-b", 10)
    clock.advance(5)
    assert await a.acquire_lease(KEY, "worker-a", 10)  # extends to +15
    clock.advance(9)
    assert not await b.acquire_lease(KEY, "worker-b", 10)
    await b.release_lease(KEY, "worker-b")  # not the holder: a no-op
    assert not await b.acquire_lease(KEY, "worker-b", 10)
    clock.advance(2)  # expired: a worker that died loses it
    assert await b.acquire_lease(KEY, "worker-b", 10)
    await b.release_lease(KEY, "worker-b")
    assert await a.acquire_lease(KEY, "worker-a", 1)
    with pytest.raises(InvalidArgumentError):
        await a.acquire_lease(KEY, "", 1)
    with pytest.raises(InvalidArgumentError):
        await a.acquire_lease(KEY, "x", 0)
    await a.delete(KEY)
    assert not data_file(tmp_path).parent.exists()  # the lease went with the key
    assert await b.acquire_lease(KEY, "worker-b", 1)
    await a.aclose()
    await b.aclose()


# --- ReplaceableStorage ----------------------------------------------------------------------


async def test_replace_rewrites_atomically_keeping_records(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        await store.save_messages(KEY, [ChatMessage("user", f"old{i}") for i in range(3)])
        record = await store.save_record(KEY, ConversationRecord("approval", {"ok": True}))
        old_head = await store.head(KEY)
        inode = data_file(tmp_path).stat().st_ino
        call = ToolCall("c1", "f", "{}")
        new = [
            ChatMessage("user", "q"),
            ChatMessage("assistant", None, (call,)),
            ChatMessage("tool", "r", tool_call_id="c1"),
        ]
        stored = await store.replace(KEY, new)
        assert [m.id for m in stored] == [m.id for m in new]
        assert all(m.created_at is not None for m in stored)
        assert await store.fetch(KEY) == stored
        head = await store.head(KEY)
        assert head.epoch != old_head.epoch
        assert head.last_seq > old_head.last_seq
        assert data_file(tmp_path).stat().st_ino != inode  # renamed over, never edited
        assert await store.fetch_records(KEY) == [record]
        assert sorted(p.name for p in data_file(tmp_path).parent.iterdir()) == [
            ".lock",
            "a.jsonl",
        ]
        before = data_file(tmp_path).read_bytes()
        with pytest.raises(InvalidMessageError):
            await store.replace(KEY, [ChatMessage("tool", "orphan", tool_call_id="zz")])
        assert data_file(tmp_path).read_bytes() == before
        assert await store.save(KEY, new[0]) == []  # its ids are known to the writer
        await store.replace(KEY, [])
        assert await store.fetch(KEY) == []
        assert await store.head(KEY) == Head(0, "", 0)
        assert await store.list_keys() == []
        assert await store.fetch_records(KEY) == [record]
        await store.delete(KEY)
        assert os.listdir(tmp_path) == []


async def test_replace_of_a_hashed_key_is_listed(tmp_path: Path) -> None:
    key = ChatKey("u", "s", "z" * 400)
    async with JsonlChatStorage(tmp_path) as store:
        await store.replace(key, [ChatMessage("user", "x")])
        assert await store.list_keys() == [key]
        (merged,) = await store.fetch_all_chats("u", "s")
        assert merged.agent_id == key.agent_id


async def test_save_messages_if_detects_a_stale_writer(tmp_path: Path) -> None:
    a, b = JsonlChatStorage(tmp_path), JsonlChatStorage(tmp_path)
    empty = await a.head(KEY)
    assert (
        len(
            await a.save_messages_if(
                KEY, [ChatMessage("user", "1")], expected_version=empty.version
            )
        )
        == 1
    )
    version = (await b.head(KEY)).version
    await b.save(KEY, ChatMessage("user", "from b"))
    before = data_file(tmp_path).read_bytes()
    with pytest.raises(ConflictError, match="nothing stored"):
        await a.save_messages_if(KEY, [ChatMessage("user", "stale")], expected_version=version)
    with pytest.raises(ConflictError):
        await a.save_messages_if(KEY, [], expected_version=version)
    assert data_file(tmp_path).read_bytes() == before
    current = (await a.head(KEY)).version
    assert texts(
        await a.save_messages_if(KEY, [ChatMessage("user", "ok")], expected_version=current)
    ) == ["ok"]
    assert texts(await b.fetch(KEY)) == ["1", "from b", "ok"]
    await a.aclose()
    await b.aclose()


# --- SessionListing --------------------------------------------------------------------------


async def test_list_sessions_newest_first_with_cursor(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        for n in range(7):
            at = T0 + timedelta(minutes=n if n != 3 else 5)  # s3 and s5 tie on last_at
            for agent in ("a", "b")[: 1 + n % 2]:
                await store.save_messages(
                    ChatKey("u", f"s{n}", agent),
                    [
                        ChatMessage("user", "x", created_at=at - timedelta(hours=1)),
                        ChatMessage("user", "y", created_at=at),
                    ],
                )
        await store.save(ChatKey("other", "s9", "a"), ChatMessage("user", "z"))
        first = await store.list_sessions("u", limit=3)
        assert [s.session_id for s in first.sessions] == ["s6", "s3", "s5"]
        assert first.sessions[1].agents == ("a", "b")
        assert first.sessions[1].message_count == 4
        assert first.sessions[1].last_at == T0 + timedelta(minutes=5)
        assert first.sessions[1].first_at == T0 + timedelta(minutes=5) - timedelta(hours=1)
        pages = [first]
        while pages[-1].next_cursor is not None:
            pages.append(await store.list_sessions("u", limit=3, cursor=pages[-1].next_cursor))
        listed = [s.session_id for p in pages for s in p.sessions]
        assert listed == ["s6", "s3", "s5", "s4", "s2", "s1", "s0"]
        assert len(pages) == 3
        with pytest.raises(InvalidArgumentError):
            await store.list_sessions("u", limit=0)
        with pytest.raises(InvalidArgumentError):
            await store.list_sessions("u", cursor="garbage!")
        assert (await store.list_sessions("nobody")).sessions == ()


async def test_list_sessions_reads_only_what_was_appended_since(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        await store.save_messages(
            KEY, [ChatMessage("user", f"m{i}", created_at=T0) for i in range(50)]
        )
        (info,) = (await store.list_sessions("u")).sessions
        assert info.message_count == 50
        summary_file = data_file(tmp_path).parent / ".summary"
        assert summary_file.exists()
        # Blank the file's middle (same size, its last bytes intact): a listing that read the
        # bodies again would count fewer messages.
        path = data_file(tmp_path)
        raw = path.read_bytes()
        path.write_bytes(raw[:100] + b"\x00" * (len(raw) - 200) + raw[-100:])
        (cached,) = (await store.list_sessions("u")).sessions
        assert cached.message_count == 50
        path.write_bytes(raw)
        await store.save(KEY, ChatMessage("user", "new", created_at=T0 + timedelta(days=1)))
        (grown,) = (await store.list_sessions("u")).sessions
        assert grown.message_count == 51
        assert grown.last_at == T0 + timedelta(days=1)
        await store.replace(KEY, [ChatMessage("user", "only", created_at=T0)])
        (replaced,) = (await store.list_sessions("u")).sessions  # a new file: rescanned
        assert replaced.message_count == 1
        await store.delete(KEY)
        assert (await store.list_sessions("u")).sessions == ()
        assert not summary_file.exists()


# --- SearchableStorage -----------------------------------------------------------------------


async def test_search_scans_only_the_users_messages(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        await store.save_messages(
            KEY,
            [
                ChatMessage("user", "my parcel never arrived, the parcel is lost"),
                ChatMessage("assistant", "sorry about the parcel"),
                ChatMessage("user", "unrelated"),
            ],
        )
        await store.save(ChatKey("u", "s2", "b"), ChatMessage("user", "a parcel"))
        await store.save(ChatKey("intruder", "s", "a"), ChatMessage("user", "parcel parcel"))
        hits = await store.search("u", "parcel")
        assert len(hits) == 3
        assert {h.key.user_id for h in hits} == {"u"}
        best = await store.search("u", "parcel lost")
        assert best[0].message.text.startswith("my parcel")
        assert "parcel" in hits[0].snippet
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert len(await store.search("u", "parcel", limit=1)) == 1
        assert await store.search("nobody", "parcel") == []
        with pytest.raises(InvalidArgumentError):
            await store.search("u", "  ")
        with pytest.raises(InvalidArgumentError):
            await store.search("u", "x", limit=0)


# --- RecordStorage ---------------------------------------------------------------------------


async def test_records_interleave_by_seq_and_never_reach_fetch(tmp_path: Path) -> None:
    a, b = JsonlChatStorage(tmp_path), JsonlChatStorage(tmp_path)
    call = ToolCall("call-1", "refund", '{"amount": 10}')
    await a.save_messages(
        KEY, [ChatMessage("user", "refund me"), ChatMessage("assistant", None, (call,))]
    )
    approval = ConversationRecord(
        "tool_approval", {"tool_call_id": "call-1", "decision": "approved"}
    )
    stored = await a.save_record(KEY, approval)
    assert stored.seq > 0
    assert stored.created_at is not None
    assert await b.save_record(KEY, approval) == stored  # idempotent by id, across instances
    await b.save(KEY, ChatMessage("tool", "refunded", tool_call_id="call-1"))
    await b.save_record(KEY, ConversationRecord("status", {"state": "done"}))
    tail = await a.fetch_since(KEY, 0)
    assert tail.seqs[1] < stored.seq < tail.seqs[2]  # in order with the messages
    assert [m.role for m in await a.fetch(KEY)] == ["user", "assistant", "tool"]
    assert [m.message.role for m in await a.fetch_all_chats("u", "s")] == [
        "user",
        "assistant",
        "tool",
    ]
    assert [m.role for m in await a.fetch(KEY, limit=2)] == ["assistant", "tool"]
    assert [r.kind for r in await b.fetch_records(KEY)] == ["tool_approval", "status"]
    (found,) = await b.fetch_records(KEY, kind="tool_approval")
    assert found == stored
    assert found.data["decision"] == "approved"
    with pytest.raises(InvalidArgumentError):
        await a.save_record(KEY, ConversationRecord("", {}))
    with pytest.raises(InvalidArgumentError):
        await a.save_record(KEY, ConversationRecord("k", {"x": object()}))
    await a.delete(KEY)
    assert await b.fetch_records(KEY) == []
    await a.aclose()
    await b.aclose()


# --- RetentionStorage ------------------------------------------------------------------------


async def test_purge_rewrites_files_drops_checkpoints_and_keeps_records(tmp_path: Path) -> None:
    clock = FakeClock(T0.timestamp())
    async with JsonlChatStorage(tmp_path, retention="1h", clock=clock) as store:
        old_only, mixed = ChatKey("u", "old", "a"), ChatKey("u", "mixed", "a")
        await store.save(old_only, ChatMessage("user", "old a", created_at=T0 - timedelta(hours=2)))
        await store.save_messages(
            mixed,
            [
                ChatMessage("user", "old b", created_at=T0 - timedelta(hours=2)),
                ChatMessage("assistant", "new c", created_at=T0 - timedelta(minutes=5)),
            ],
        )
        await store.save_record(mixed, ConversationRecord("status", {"s": "kept"}))
        head = await store.head(mixed)
        cp = SummaryCheckpoint((summary("g"),), head.last_seq, head.epoch, "m", T0)
        assert await store.save_checkpoint(mixed, cp, expected_version=0) is not None
        inode = data_file(tmp_path, mixed).stat().st_ino
        # The first save purged with the clock already: "old a" went then.
        assert await store.fetch(old_only) == []
        assert await store.purge() == 1
        assert texts(await store.fetch(mixed)) == ["new c"]
        assert data_file(tmp_path, mixed).stat().st_ino != inode
        assert (await store.head(mixed)).epoch != head.epoch
        assert await store.load_checkpoint(mixed) is None
        assert not (data_file(tmp_path, mixed).parent / "a.ckpt").exists()
        assert [r.kind for r in await store.fetch_records(mixed)] == ["status"]
        assert await store.list_keys() == [mixed]
        assert not data_file(tmp_path, old_only).parent.exists()
        assert await store.purge() == 0
        assert await store.purge(now=T0 + timedelta(days=1)) == 1
        assert await store.list_keys() == []
        with pytest.raises(InvalidArgumentError):
            await store.purge(now=datetime(2024, 1, 1))  # naive
    async with JsonlChatStorage(tmp_path) as forever:
        assert await forever.purge() == 0


async def test_purge_runs_on_writes_at_most_once_per_interval(tmp_path: Path) -> None:
    clock = FakeClock(T0.timestamp())

    def ago(seconds: float) -> datetime:
        return datetime.fromtimestamp(clock.now - seconds, UTC)

    async with JsonlChatStorage(tmp_path, retention=60, purge_interval=10, clock=clock) as store:
        await store.save(KEY, ChatMessage("user", "m1", created_at=ago(30)))
        clock.advance(5)
        await store.save(KEY, ChatMessage("user", "m2", created_at=ago(0)))
        clock.advance(40)  # m1 is 75 s old; 45 s since the last purge
        await store.save(KEY, ChatMessage("user", "m3", created_at=ago(0)))
        assert texts(await store.fetch(KEY)) == ["m2", "m3"]
        await store.save(KEY, ChatMessage("user", "m4", created_at=ago(70)))  # in the interval
        assert texts(await store.fetch(KEY)) == ["m2", "m3", "m4"]
        clock.advance(11)
        await store.save(KEY, ChatMessage("user", "m5", created_at=ago(0)))
        assert texts(await store.fetch(KEY)) == ["m2", "m3", "m5"]


async def test_hashed_names_are_listed_and_searched_by_their_real_ids(tmp_path: Path) -> None:
    key = ChatKey("U" * 300, "S/" * 200, "agent")
    async with JsonlChatStorage(tmp_path) as store:
        await store.save(key, ChatMessage("user", "hello world", created_at=T0))
        (info,) = (await store.list_sessions(key.user_id)).sessions
        assert (info.session_id, info.agents, info.message_count) == (key.session_id, ("agent",), 1)
        (hit,) = await store.search(key.user_id, "world")
        assert hit.key == key
        await store.save_record(key, ConversationRecord("k", {}))
        assert await store.list_keys(user_id=key.user_id) == [key]

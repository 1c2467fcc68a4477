"""JSONL store erasure: after ``delete`` / ``delete_user`` (and a purge or a replace) returns, the
erased text is in no file under the store's directory: not in compaction leftovers, temporary
files, checkpoints, leases, records or summaries."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.jsonl import JsonlChatStorage
from storage.testing.harness import FakeClock

pytestmark = pytest.mark.anyio

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def every_file(root: Path) -> list[Path]:
    return [Path(d) / f for d, _, files in os.walk(root) for f in files]


def holders(root: Path, secret: str) -> list[str]:
    """Every file under ``root`` whose raw bytes hold ``secret`` (UTF-8 or JSON-escaped)."""
    needles = {secret.encode("utf-8"), secret.encode("unicode_escape")}
    return [
        str(p.relative_to(root))
        for p in every_file(root)
        if any(n in p.read_bytes() for n in needles)
    ]


def write_text(path: str, text: str) -> None:
    Path(path).write_text(text, encoding="utf-8")


def summary(text: str) -> ChatMessage:
    return ChatMessage("system", text, metadata={"chatlayers": {"summary": True}})


async def fill(store: JsonlChatStorage, root: Path, key: ChatKey, secret: str) -> None:
    """Put ``secret`` everywhere the store keeps text for ``key``, and leave the leftovers a
    crash in the middle of a compaction, a replace, a checkpoint or a lease write leaves."""
    call = ToolCall("c1", "lookup", f'{{"q": "{secret}"}}')
    await store.save_messages(
        key,
        [
            ChatMessage("user", f"my secret is {secret} ✓", metadata={"note": secret}),
            ChatMessage("assistant", None, (call,)),
            ChatMessage("tool", f"found {secret}", tool_call_id="c1"),
        ],
    )
    await store.save_record(key, ConversationRecord("note", {"text": secret}))
    head = await store.head(key)
    made = SummaryCheckpoint((summary(f"user said {secret}"),), head.last_seq, head.epoch, "t", T0)
    assert await store.save_checkpoint(key, made, expected_version=0) is not None
    assert await store.acquire_lease(key, f"worker-{secret}", 60)
    await store.list_sessions(key.user_id)  # writes the session's .summary
    data = store._paths(key).data
    session_dir = os.path.dirname(data)
    agent = os.path.basename(data)[: -len(".jsonl")]
    for leftover in (f".{agent}.jsonl.tmp", f".{agent}.ckpt.tmp", f".{agent}.lease.tmp"):
        write_text(os.path.join(session_dir, leftover), f"left by a crash: {secret}")
    assert holders(root, secret)


async def test_delete_leaves_no_trace_of_the_conversation(tmp_path: Path) -> None:
    secret, kept = f"erase-{uuid.uuid4().hex}", f"keep-{uuid.uuid4().hex}"
    victim, neighbour = ChatKey("u", "s", "victim"), ChatKey("u", "s", "neighbour")
    async with JsonlChatStorage(tmp_path) as store:
        await fill(store, tmp_path, victim, secret)
        await fill(store, tmp_path, neighbour, kept)
        await store.compact(victim)
        await store.delete(victim)
        assert holders(tmp_path, secret) == []
        assert holders(tmp_path, kept)  # the grep can find what is still stored
        assert await store.fetch(victim) == []
        assert await store.load_checkpoint(victim) is None
        assert await store.fetch_records(victim) == []
        assert len(await store.fetch(neighbour)) == 3


async def test_delete_user_leaves_no_trace_of_the_user(tmp_path: Path) -> None:
    secret, kept = f"erase-{uuid.uuid4().hex}", f"keep-{uuid.uuid4().hex}"
    async with JsonlChatStorage(tmp_path) as store:
        for n, key in enumerate(
            [
                ChatKey("victim", "s1", "a"),
                ChatKey("victim", "s2", "b"),
                ChatKey("victim", "s" * 300, "z" * 300),
            ]
        ):
            await fill(store, tmp_path, key, f"{secret}-{n}")
        await fill(store, tmp_path, ChatKey("other", "s1", "a"), kept)
        await store.delete_user("victim")
        assert holders(tmp_path, secret) == []
        assert sorted(os.listdir(tmp_path)) == ["other"]
        assert holders(tmp_path, kept)
        assert await store.list_sessions("victim") == await store.list_sessions("nobody")
        assert await store.search("victim", secret) == []


async def test_replace_and_purge_leave_no_trace_of_what_they_removed(tmp_path: Path) -> None:
    replaced, purged = f"old-{uuid.uuid4().hex}", f"aged-{uuid.uuid4().hex}"
    key = ChatKey("u", "s", "a")
    clock = FakeClock(T0.timestamp())
    async with JsonlChatStorage(tmp_path, retention="1d", clock=clock) as store:
        await store.save(key, ChatMessage("user", f"say {replaced}", created_at=T0))
        head = await store.head(key)
        made = SummaryCheckpoint((summary(replaced),), head.last_seq, head.epoch, "t", T0)
        await store.save_checkpoint(key, made, expected_version=0)
        await store.replace(key, [ChatMessage("user", "clean", created_at=T0)])
        assert holders(tmp_path, replaced) == []
        old = ChatKey("u", "s", "b")
        await store.save(old, ChatMessage("user", f"say {purged}", created_at=T0))
        await store.save(old, ChatMessage("user", "recent", created_at=T0 + timedelta(days=2)))
        assert await store.purge(now=T0 + timedelta(days=2)) == 2  # both "say" and "clean"
        assert holders(tmp_path, purged) == []
        assert [m.text for m in await store.fetch(old)] == ["recent"]

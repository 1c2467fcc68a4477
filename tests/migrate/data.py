"""Conversations to migrate: tricky keys, tool calls, caller times, records between messages
and summary checkpoints (shared by the migrate, verify and mirror tests)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from storage.abilities import (
    CheckpointStorage,
    ConversationRecord,
    RecordStorage,
    SummaryCheckpoint,
    find_ability,
)
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.migrate import record_side
from storage.stores.memory import InMemoryChatStorage

T0 = datetime(2024, 5, 15, 15, 0, tzinfo=UTC)
KEYS = (
    ChatKey("u#1:/..", "s*%/é🙂", "agent:a"),
    ChatKey("u#1:/..", "s*%/é🙂", "other"),
    ChatKey("user-2", "s{1}", "a?[b]"),
)
SUMMARY_META = {"chatlayers": {"summary": True}}


def conversation(n: int, turns: int = 3) -> list[ChatMessage]:
    """``turns`` turns, the second with a tool call and its result; ids and times fixed."""
    out: list[ChatMessage] = []
    at = T0 + timedelta(minutes=n)
    for t in range(turns):
        out.append(ChatMessage("user", f"question {n}.{t}", id=f"c{n}-u{t}", created_at=at))
        if t == 1:
            call = ToolCall(f"call-{n}", "lookup", '{"order": 1234}')
            out.append(
                ChatMessage("assistant", None, tool_calls=(call,), id=f"c{n}-a{t}", created_at=at)
            )
            out.append(
                ChatMessage(
                    "tool",
                    "found",
                    tool_call_id=call.id,
                    name="lookup",
                    id=f"c{n}-t{t}",
                    created_at=at,
                )
            )
        out.append(
            ChatMessage(
                "assistant",
                f"answer {n}.{t}",
                id=f"c{n}-r{t}",
                created_at=at,
                metadata={"turn": t},
            )
        )
        at += timedelta(seconds=30)
    return out


async def seed(stack: Any, keys: tuple[ChatKey, ...] = KEYS) -> None:
    """Every key: messages, a record after the third message, the rest, then (all keys but
    the last) a summary checkpoint covering the first turn."""
    side = record_side(stack)
    records = find_ability(side.storage, RecordStorage)
    checkpoints = find_ability(side.storage, CheckpointStorage)
    assert records is not None
    assert checkpoints is not None
    for n, key in enumerate(keys):
        messages = conversation(n)
        await side.storage.save_messages(key, messages[:3])
        await records.save_record(
            key,
            ConversationRecord(
                "tool_approval",
                {"tool_call_id": f"call-{n}", "ok": True},
                id=f"r{n}",
                created_at=T0,
            ),
        )
        await side.storage.save_messages(key, messages[3:])
        await records.save_record(key, ConversationRecord("status", {"n": n}, id=f"s{n}"))
        if n == len(keys) - 1:
            continue
        tail = await checkpoints.fetch_since(key, 0)
        summary = ChatMessage(
            "system", f"summary of turn 0 of {n}", id=f"sum{n}", metadata=SUMMARY_META,
            created_at=T0,
        )  # fmt: skip
        stored = await checkpoints.save_checkpoint(
            key,
            SummaryCheckpoint((summary,), tail.seqs[1], tail.head.epoch, "manual", T0),
            expected_version=0,
        )
        assert stored is not None


async def unrelated(stack: Any, count: int = 7) -> None:
    """Messages of another user first, so the target's sequence numbers differ."""
    for n in range(count):
        await stack.save(ChatKey("someone-else", "s", "a"), ChatMessage("user", f"x{n}"))


class ListingOnly:
    """A store with messages and key listing only (no checkpoints, records, ...)."""

    def __init__(self) -> None:
        self._store = InMemoryChatStorage()

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        return await self._store.save(key, message)

    async def save_messages(self, key: ChatKey, messages: Any) -> list[ChatMessage]:
        return await self._store.save_messages(key, messages)

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        return await self._store.fetch(key, limit=limit)

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[Any]:
        return await self._store.fetch_all_chats(user_id, session_id)

    async def delete(self, key: ChatKey) -> None:
        await self._store.delete(key)

    async def delete_user(self, user_id: str) -> None:
        await self._store.delete_user(user_id)

    async def list_keys(self, user_id: str | None = None, session_id: str | None = None) -> Any:
        return await self._store.list_keys(user_id, session_id)

    async def aclose(self) -> None:
        await self._store.aclose()

    async def __aenter__(self) -> ListingOnly:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

"""The payload seam: every method that carries messages or record data crosses a payload
layer's hooks, down and up, whatever ability it belongs to."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import attrs
import pytest

from storage import open_storage
from storage.abilities import (
    ConversationRecord,
    RecordStorage,
    SummaryCheckpoint,
    find_ability,
)
from storage.errors import InvalidMessageError
from storage.layers.payload import Down, PayloadLayer, Send, SendRecord, Up
from storage.layers.transforming import TransformingChatStorage
from storage.message import ChatKey, ChatMessage
from storage.pii import PIIScrubber
from storage.stores.memory import InMemoryChatStorage

pytestmark = pytest.mark.anyio
KEY = ChatKey("u", "s", "a")
SEALED = "sealed:"


def summary(text: str) -> ChatMessage:
    return ChatMessage("system", text, metadata={"chatlayers": {"summary": True}})


class Marking(PayloadLayer):
    """Prefixes message text and wraps record data on the way down, undoes both on the way
    up; a message whose text is ``"lost"`` does not come up (as a value sealed with a
    destroyed key). Its declaration is PayloadLayer's."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.seen: list[tuple[str, str]] = []

    async def _down(
        self, key: ChatKey, messages: list[ChatMessage], what: Down, send: Send
    ) -> list[ChatMessage]:
        self.seen.append(("down", what))
        marked = [attrs.evolve(m, content=SEALED + m.text) for m in messages]
        return [attrs.evolve(m, content=m.text.removeprefix(SEALED)) for m in await send(marked)]

    async def _up(self, key: ChatKey, messages: list[ChatMessage], what: Up) -> list[ChatMessage]:
        self.seen.append(("up", what))
        assert all(m.text.startswith(SEALED) for m in messages)
        opened = [attrs.evolve(m, content=m.text.removeprefix(SEALED)) for m in messages]
        return [m for m in opened if m.text != "lost"]

    async def _down_record(
        self, key: ChatKey, record: ConversationRecord, send: SendRecord
    ) -> ConversationRecord:
        stored = await send(attrs.evolve(record, data={"sealed": dict(record.data)}))
        return attrs.evolve(stored, data=stored.data["sealed"])

    async def _up_records(
        self, key: ChatKey, records: list[ConversationRecord]
    ) -> list[ConversationRecord]:
        return [attrs.evolve(r, data=r.data["sealed"]) for r in records]


async def test_every_payload_path_crosses_the_hooks() -> None:
    inner = InMemoryChatStorage()
    layer = Marking(inner)
    other = ChatKey("u", "s", "other")
    assert [m.text for m in await layer.save(KEY, ChatMessage("user", "hello world"))] == [
        "hello world"
    ]
    await layer.save_messages(KEY, [ChatMessage("assistant", "hi"), ChatMessage("user", "lost")])
    await layer.save(other, ChatMessage("user", "from another agent"))
    assert [m.text for m in await inner.fetch(KEY)] == [
        "sealed:hello world",
        "sealed:hi",
        "sealed:lost",
    ]
    assert [m.text for m in await layer.fetch(KEY)] == ["hello world", "hi"]
    assert [m.text for m in await layer.fetch(KEY, limit=2)] == ["hi"]
    merged = await layer.fetch_all_chats("u", "s")
    assert [(m.agent_id, m.message.text) for m in merged] == [
        ("a", "hello world"),
        ("a", "hi"),
        ("other", "from another agent"),
    ]
    hits = await layer.search("u", "world")
    assert [(h.key, h.message.text) for h in hits] == [(KEY, "hello world")]

    tail = await layer.fetch_since(KEY, 0)
    raw = await inner.fetch_since(KEY, 0)
    assert [m.text for m in tail.messages] == ["hello world", "hi"]
    assert tail.seqs == raw.seqs[:2]  # each seq beside its own message

    head = await layer.head(KEY)
    made = SummaryCheckpoint(
        (summary("gist"),), head.last_seq, head.epoch, "manual", datetime.now(UTC)
    )
    stored = await layer.save_checkpoint(KEY, made, expected_version=0)
    assert stored is not None
    assert [m.text for m in stored.messages] == ["gist"]
    loaded_raw = await inner.load_checkpoint(KEY)
    assert loaded_raw is not None
    assert [m.text for m in loaded_raw.messages] == ["sealed:gist"]
    loaded = await layer.load_checkpoint(KEY)
    assert loaded is not None
    assert [m.text for m in loaded.messages] == ["gist"]
    lost = attrs.evolve(made, messages=(summary("lost"),))
    await layer.save_checkpoint(KEY, lost, expected_version=1)
    assert await layer.load_checkpoint(KEY) is None  # a summary that lost its message is void

    record = await layer.save_record(KEY, ConversationRecord("status", {"v": 1}))
    assert record.data == {"v": 1}
    assert [r.data for r in await inner.fetch_records(KEY)] == [{"sealed": {"v": 1}}]
    assert [r.data for r in await layer.fetch_records(KEY)] == [{"v": 1}]

    version = (await layer.head(KEY)).version
    await layer.save_messages_if(KEY, [ChatMessage("user", "then")], expected_version=version)
    await layer.replace(KEY, [ChatMessage("user", "all new")])
    assert [m.text for m in await inner.fetch(KEY)] == ["sealed:all new"]
    assert {what for _, what in layer.seen} == {"messages", "history", "checkpoint"}


async def test_a_checkpoint_message_dropped_on_the_way_down_is_refused() -> None:
    class Dropping(Marking):
        async def _down(
            self, key: ChatKey, messages: list[ChatMessage], what: Down, send: Send
        ) -> list[ChatMessage]:
            return await send([] if what == "checkpoint" else messages)

    layer = Dropping(InMemoryChatStorage())
    await layer.save(KEY, ChatMessage("user", "x"))
    head = await layer.head(KEY)
    made = SummaryCheckpoint(
        (summary("gist"),), head.last_seq, head.epoch, "manual", datetime.now(UTC)
    )
    with pytest.raises(InvalidMessageError, match="dropped a summary message"):
        await layer.save_checkpoint(KEY, made, expected_version=0)


class ReplaceRecorder(InMemoryChatStorage):
    """A store that records the keyword arguments ``replace`` gets."""

    def __init__(self) -> None:
        super().__init__()
        self.replaced: list[dict[str, Any]] = []

    async def replace(self, key: ChatKey, messages: Any, **options: Any) -> list[ChatMessage]:
        self.replaced.append(options)
        return await super().replace(key, messages)


@pytest.mark.parametrize("layer", ["marking", "transforming"])
async def test_replace_passes_expected_version_through(layer: str) -> None:
    inner = ReplaceRecorder()
    top: Any = (
        Marking(inner) if layer == "marking" else TransformingChatStorage(inner, lambda m, k: m)
    )
    await top.replace(KEY, [ChatMessage("user", "a")])
    await top.replace(KEY, [ChatMessage("user", "b")], expected_version="e.1")
    assert inner.replaced == [{}, {"expected_version": "e.1"}]


async def test_the_scrub_layer_scrubs_records(tmp_path: Any) -> None:
    """A tool approval's data can carry PII: through ``scrub::`` it is stored scrubbed, keys
    and non-text values kept, the same placeholder as in the conversation's messages."""
    url = f"scrub?secret=s::sqlite:///{tmp_path / 'chats.db'}"
    async with open_storage(url) as stack:
        await stack.save(KEY, ChatMessage("user", "mail me at ada@example.com"))
        records = find_ability(stack, RecordStorage)
        assert records is not None
        saved = await records.save_record(
            KEY,
            ConversationRecord(
                "tool_approval",
                {
                    "tool_call_id": "call_1",
                    "decision": "approved",
                    "note": "ada@example.com",
                    "n": 3,
                },
            ),
        )
        (message,) = await stack.fetch(KEY)
        placeholder = message.text.removeprefix("mail me at ")
        assert placeholder.startswith("<EMAIL_ADDRESS_")
        assert saved.data["note"] == placeholder
        (stored,) = await stack.base.fetch_records(KEY)  # type: ignore[attr-defined]
        assert dict(stored.data) == {
            "tool_call_id": "call_1",
            "decision": "approved",
            "note": placeholder,
            "n": 3,
        }


async def test_a_plain_function_transform_leaves_records_as_they_are() -> None:
    inner = InMemoryChatStorage()
    layer = TransformingChatStorage(inner, lambda m, k: attrs.evolve(m, content=m.text.upper()))
    await layer.save_record(KEY, ConversationRecord("status", {"note": "as is"}))
    assert [dict(r.data) for r in await inner.fetch_records(KEY)] == [{"note": "as is"}]


async def test_the_scrubber_scrubs_record_data_keyed_and_nested() -> None:
    scrubber = PIIScrubber(secret="s")
    record = ConversationRecord(
        "ui", {"user": {"first_name": "Mia", "contact": ["+44 20 7946 0958"]}, "ok": True}
    )
    scrubbed = scrubber.transform_record(record, KEY)
    user = scrubbed.data["user"]
    assert user["first_name"].startswith("<PERSON_")
    assert user["contact"][0].startswith("<PHONE_NUMBER_")
    assert scrubbed.data["ok"] is True
    assert (scrubbed.id, scrubbed.kind) == (record.id, record.kind)
    assert scrubber.transform_record(scrubbed, KEY) == scrubbed  # idempotent

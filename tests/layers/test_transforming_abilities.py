"""The transforming layer transforms every path that writes a message, abilities included."""

from __future__ import annotations

from datetime import UTC, datetime

import attrs
import pytest

from storage.abilities import (
    CheckpointStorage,
    ReplaceableStorage,
    SummaryCheckpoint,
    find_ability,
)
from storage.errors import ConflictError, InvalidMessageError
from storage.layers.transforming import TransformingChatStorage
from storage.message import ChatKey, ChatMessage
from storage.stores.memory import InMemoryChatStorage

pytestmark = pytest.mark.anyio
KEY = ChatKey("u", "s", "a")


def upper(message: ChatMessage, key: ChatKey) -> ChatMessage | None:
    if message.text == "drop me":
        return None
    if message.text == "explode":
        raise RuntimeError("transform failed")
    return attrs.evolve(message, content=message.text.upper())


def summary(text: str) -> ChatMessage:
    return ChatMessage("system", text, metadata={"chatlayers": {"summary": True}})


async def test_replace_and_conditional_save_are_transformed() -> None:
    inner = InMemoryChatStorage()
    layer = TransformingChatStorage(inner, upper)
    replaceable = find_ability(layer, ReplaceableStorage)
    assert replaceable is not None
    stored = await replaceable.replace(
        KEY, [ChatMessage("user", "hi"), ChatMessage("user", "drop me")]
    )
    assert [m.text for m in stored] == ["HI"]
    assert [m.text for m in await inner.fetch(KEY)] == ["HI"]
    version = (await inner.head(KEY)).version
    await replaceable.save_messages_if(KEY, [ChatMessage("user", "more")], expected_version=version)
    assert [m.text for m in await inner.fetch(KEY)] == ["HI", "MORE"]
    with pytest.raises(ConflictError):
        await replaceable.save_messages_if(
            KEY, [ChatMessage("user", "drop me")], expected_version=version
        )
    with pytest.raises(RuntimeError, match="transform failed"):
        await replaceable.replace(KEY, [ChatMessage("user", "ok"), ChatMessage("user", "explode")])
    assert [m.text for m in await inner.fetch(KEY)] == ["HI", "MORE"]


async def test_checkpoint_messages_are_transformed_and_never_dropped() -> None:
    inner = InMemoryChatStorage()
    layer = TransformingChatStorage(inner, upper)
    checkpoints = find_ability(layer, CheckpointStorage)
    assert checkpoints is not None
    await layer.save(KEY, ChatMessage("user", "hello"))
    head = await checkpoints.head(KEY)
    made = SummaryCheckpoint(
        (summary("the gist"),), head.last_seq, head.epoch, "manual", datetime.now(UTC)
    )
    stored = await checkpoints.save_checkpoint(KEY, made, expected_version=0)
    assert stored is not None
    assert [m.text for m in stored.messages] == ["THE GIST"]
    loaded = await inner.load_checkpoint(KEY)
    assert loaded is not None
    assert [m.text for m in loaded.messages] == ["THE GIST"]
    dropped = attrs.evolve(made, messages=(summary("drop me"),))
    with pytest.raises(InvalidMessageError, match="dropped a summary"):
        await checkpoints.save_checkpoint(KEY, dropped, expected_version=1)
    assert (await inner.load_checkpoint(KEY)) == loaded


@pytest.mark.anyio
async def test_a_huge_message_is_transformed_off_the_event_loop_thread() -> None:
    import threading

    from storage.layers.transforming import TransformingChatStorage
    from storage.stores.memory import InMemoryChatStorage

    threads: list[int] = []

    def record(message: ChatMessage, key: ChatKey) -> ChatMessage:
        threads.append(threading.get_ident())
        return message

    layer = TransformingChatStorage(InMemoryChatStorage(), record, thread_chars=1_000)
    key = ChatKey("u", "s", "a")
    loop_thread = threading.get_ident()
    await layer.save(key, ChatMessage("user", "small"))
    await layer.save(key, ChatMessage("user", "x" * 5_000))
    assert threads[0] == loop_thread
    assert threads[1] != loop_thread  # the scrubber of a 5 kB message does not stall the loop
    assert [len(m.text) for m in await layer.fetch(key)] == [5, 5_000]

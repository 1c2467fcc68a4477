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


class Batched:
    """A transform with ``transform_batch``: records each call and the thread it ran on."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int]] = []  # (batch size, thread)
        self.singles = 0

    def __call__(self, message: ChatMessage, key: ChatKey) -> ChatMessage | None:
        self.singles += 1
        return upper(message, key)

    def transform_batch(
        self, messages: list[ChatMessage], key: ChatKey
    ) -> list[ChatMessage | None]:
        import threading

        self.batches.append((len(messages), threading.get_ident()))
        return [upper(message, key) for message in messages]


async def test_a_batch_transform_gets_each_batch_in_one_call() -> None:
    import threading

    transform = Batched()
    layer = TransformingChatStorage(InMemoryChatStorage(), transform, thread_chars=1_000)
    batch = [ChatMessage("user", "a"), ChatMessage("user", "drop me"), ChatMessage("user", "b")]
    stored = await layer.save_messages(KEY, batch)
    assert [m.text for m in stored] == ["A", "B"]  # the dropped one is absent, order kept
    await layer.save(KEY, ChatMessage("user", "c"))
    await layer.save_messages(KEY, [ChatMessage("user", "x" * 600) for _ in range(2)])
    assert transform.singles == 0
    loop = threading.get_ident()
    assert [(n, thread == loop) for n, thread in transform.batches] == [
        (3, True),
        (1, True),
        (2, False),  # 1,200 characters in the batch: off the event loop
    ]
    assert [m.text for m in await layer.fetch(KEY)][:3] == ["A", "B", "C"]
    with pytest.raises(RuntimeError, match="transform failed"):
        await layer.save_messages(KEY, [ChatMessage("user", "d"), ChatMessage("user", "explode")])
    assert len(await layer.fetch(KEY)) == 5  # nothing of the failed batch was stored


async def test_a_batch_transform_must_answer_every_message() -> None:
    class Short(Batched):
        def transform_batch(
            self, messages: list[ChatMessage], key: ChatKey
        ) -> list[ChatMessage | None]:
            return super().transform_batch(messages, key)[:-1]

    layer = TransformingChatStorage(InMemoryChatStorage(), Short())
    with pytest.raises(InvalidMessageError, match="1 results for 2 messages"):
        await layer.save_messages(KEY, [ChatMessage("user", "a"), ChatMessage("user", "b")])
    assert await layer.fetch(KEY) == []


async def test_the_scrubber_scrubs_a_batch_as_it_scrubs_each_message() -> None:
    from storage.pii import PIIScrubber

    texts = ["mail a@b.co", "flight on 2024-05-24", "mail a@b.co", "call +1 415 555 0147"]
    batch = [ChatMessage("user", t) for t in texts]
    one_by_one = PIIScrubber(secret="s")
    expected = [one_by_one(m, KEY) for m in batch]
    scrubber = PIIScrubber(secret="s")
    layer = TransformingChatStorage(InMemoryChatStorage(), scrubber)
    stored = await layer.save_messages(KEY, batch)
    assert [m.content for m in stored] == [m.content for m in expected]
    assert scrubber.counts == one_by_one.counts  # a repeated value is counted each time

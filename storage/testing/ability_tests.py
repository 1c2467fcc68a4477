"""Ability tests of the conformance kit: each runs on every stack where
:func:`storage.abilities.find_ability` finds its ability, and is skipped elsewhere."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest

from storage.abilities import (
    CheckpointStorage,
    ListableStorage,
    ReplaceableStorage,
    SequencedStorage,
    SummaryCheckpoint,
    find_ability,
)
from storage.errors import ConflictError, InvalidArgumentError, InvalidMessageError
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.protocol import ChatStorage
from storage.testing.harness import FakeClock, StoreHarness
from storage.testing.protocol_tests import KEY, msg

__all__ = [
    "AbilityTests",
    "MakeStack",
    "checkpoint_of",
    "need",
    "stack_with",
    "summary_message",
    "texts",
]

A = TypeVar("A")
MakeStack = Callable[..., Awaitable[ChatStorage]]
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
OTHER = ChatKey("user-1", "session-1", "agent-2")


def need(stack: object, ability: type[A]) -> A:
    """``stack`` as ``ability``, or skip the test when the stack does not have it."""
    found = find_ability(stack, ability)
    if found is None:
        pytest.skip(f"this stack has no {ability.__name__}")
    return found


def summary_message(text: str) -> ChatMessage:
    return ChatMessage("system", text, metadata={"chatlayers": {"summary": True}})


def checkpoint_of(
    messages: tuple[ChatMessage, ...],
    covers_to: int,
    epoch: str,
    summarizer: str,
    created_at: datetime,
) -> SummaryCheckpoint:
    # attrs' mypy plugin types the ``converter=tuple`` field's argument as unsolvable.
    return SummaryCheckpoint(messages, covers_to, epoch, summarizer, created_at)


def texts(messages: list[ChatMessage]) -> list[str]:
    return [m.text for m in messages]


async def stack_with(make_stack: MakeStack, **options: Any) -> ChatStorage:
    try:
        return await make_stack(**options)
    except TypeError as exc:
        pytest.skip(f"the store does not take {sorted(options)}: {exc}")


class AbilityTests:
    """Tests of every optional ability of :mod:`storage.abilities`."""

    # --- SequencedStorage ----------------------------------------------------------------

    async def test_head_and_fetch_since(self, store: ChatStorage) -> None:
        seq = need(store, SequencedStorage)
        empty = await seq.head(KEY)
        assert (empty.last_seq, empty.epoch, empty.checkpoint_version) == (0, "", 0)
        assert (await seq.fetch_since(KEY, 0)).messages == ()
        stored = await store.save_messages(KEY, [msg("a"), msg("b", "assistant"), msg("c")])
        tail = await seq.fetch_since(KEY, 0)
        assert list(tail.messages) == stored == await store.fetch(KEY)
        assert list(tail.seqs) == sorted(set(tail.seqs))
        assert len(tail.seqs) == 3
        head = await seq.head(KEY)
        assert tail.head == head
        assert head.last_seq == tail.seqs[-1]
        assert head.epoch
        after_first = await seq.fetch_since(KEY, tail.seqs[0])
        assert texts(list(after_first.messages)) == ["b", "c"]
        assert after_first.seqs == tail.seqs[1:]
        assert (await seq.fetch_since(KEY, head.last_seq)).messages == ()
        await store.save(KEY, msg("d", "assistant"))
        newer = await seq.fetch_since(KEY, head.last_seq)
        assert texts(list(newer.messages)) == ["d"]
        assert newer.seqs[0] > head.last_seq
        assert newer.head.epoch == head.epoch
        assert newer.head.last_seq == newer.seqs[0]
        # Another key's writes do not move this key's head.
        await store.save(OTHER, msg("elsewhere"))
        assert (await seq.head(KEY)) == newer.head
        for bad in (-1, "1", True, 1.5, None):
            with pytest.raises(InvalidArgumentError):
                await seq.fetch_since(KEY, bad)  # type: ignore[arg-type]

    async def test_epoch_changes_on_delete_and_delete_user(self, store: ChatStorage) -> None:
        seq = need(store, SequencedStorage)
        await store.save(KEY, msg("first life"))
        first = await seq.head(KEY)
        await store.delete(KEY)
        gone = await seq.head(KEY)
        assert (gone.last_seq, gone.epoch) == (0, "")
        assert (await seq.fetch_since(KEY, 0)).messages == ()
        await store.save(KEY, msg("second life"))
        second = await seq.head(KEY)
        assert second.epoch
        assert second.epoch != first.epoch
        await store.delete_user(KEY.user_id)
        assert (await seq.head(KEY)).last_seq == 0
        await store.save(KEY, msg("third life"))
        assert (await seq.head(KEY)).epoch not in (first.epoch, second.epoch)

    async def test_version_changes_on_every_write(self, store: ChatStorage) -> None:
        seq = need(store, SequencedStorage)
        versions = [(await seq.head(KEY)).version]
        for n in range(3):
            await store.save(KEY, msg(f"m{n}"))
            versions.append((await seq.head(KEY)).version)
        assert len(set(versions)) == 4
        await store.save(KEY, ChatMessage("user", "again", id="fixed"))
        before = (await seq.head(KEY)).version
        assert await store.save(KEY, ChatMessage("user", "again", id="fixed")) == []
        assert (await seq.head(KEY)).version == before  # an idempotent retry writes nothing

    # --- CheckpointStorage ---------------------------------------------------------------

    async def _saved_history(self, store: ChatStorage, key: ChatKey = KEY) -> list[int]:
        seq = need(store, SequencedStorage)
        await store.save_messages(
            key, [msg("one"), msg("two", "assistant"), msg("three"), msg("four", "assistant")]
        )
        return list((await seq.fetch_since(key, 0)).seqs)

    async def test_checkpoint_compare_and_set(self, store: ChatStorage) -> None:
        cps = need(store, CheckpointStorage)
        assert await cps.load_checkpoint(KEY) is None
        seqs = await self._saved_history(store)
        head = await cps.head(KEY)
        made = checkpoint_of(
            (summary_message("summary of one and two"),), seqs[1], head.epoch, "manual", T0
        )
        stored = await cps.save_checkpoint(KEY, made, expected_version=0)
        assert stored is not None
        assert stored.version == 1
        assert (stored.covers_to, stored.epoch, stored.summarizer) == (
            seqs[1],
            head.epoch,
            "manual",
        )
        assert texts(list(stored.messages)) == ["summary of one and two"]
        assert all(m.is_summary for m in stored.messages)
        loaded = await cps.load_checkpoint(KEY)
        assert loaded is not None
        assert loaded.version == 1
        assert [m.id for m in loaded.messages] == [m.id for m in stored.messages]
        assert texts(list(loaded.messages)) == texts(list(stored.messages))
        assert loaded.covers_to == seqs[1]
        assert (await cps.head(KEY)).checkpoint_version == 1
        # A writer that read version 0 loses: nothing written.
        rival = checkpoint_of((summary_message("rival"),), seqs[2], head.epoch, "rival", T0)
        assert await cps.save_checkpoint(KEY, rival, expected_version=0) is None
        assert await cps.save_checkpoint(KEY, rival, expected_version=5) is None
        still = await cps.load_checkpoint(KEY)
        assert still is not None
        assert texts(list(still.messages)) == ["summary of one and two"]
        # The next one, against version 1, wins and becomes version 2.
        newer = await cps.save_checkpoint(KEY, rival, expected_version=1)
        assert newer is not None
        assert newer.version == 2
        assert (await cps.head(KEY)).checkpoint_version == 2
        # Covering the last message is fine.
        last = checkpoint_of((summary_message("all"),), seqs[-1], head.epoch, "m", T0)
        assert (await cps.save_checkpoint(KEY, last, expected_version=2)) is not None

    async def test_checkpoint_refused_for_another_epoch_or_unheld_sequence(
        self, store: ChatStorage
    ) -> None:
        cps = need(store, CheckpointStorage)
        seqs = await self._saved_history(store)
        head = await cps.head(KEY)
        wrong_epoch = checkpoint_of((summary_message("s"),), seqs[1], "not-the-epoch", "m", T0)
        assert await cps.save_checkpoint(KEY, wrong_epoch, expected_version=0) is None
        beyond = checkpoint_of((summary_message("s"),), head.last_seq + 1000, head.epoch, "m", T0)
        assert await cps.save_checkpoint(KEY, beyond, expected_version=0) is None
        elsewhere = checkpoint_of((summary_message("s"),), seqs[0], head.epoch, "m", T0)
        assert await cps.save_checkpoint(OTHER, elsewhere, expected_version=0) is None
        assert await cps.load_checkpoint(KEY) is None
        assert await cps.load_checkpoint(OTHER) is None
        assert (await cps.head(KEY)).checkpoint_version == 0
        # A checkpoint made before a delete is void in the key's next life.
        good = checkpoint_of((summary_message("s"),), seqs[1], head.epoch, "m", T0)
        assert await cps.save_checkpoint(KEY, good, expected_version=0) is not None
        await store.delete(KEY)
        await self._saved_history(store)
        assert await cps.load_checkpoint(KEY) is None
        assert await cps.save_checkpoint(KEY, good, expected_version=0) is None

    async def test_checkpoint_messages_must_be_summaries(self, store: ChatStorage) -> None:
        cps = need(store, CheckpointStorage)
        seqs = await self._saved_history(store)
        head = await cps.head(KEY)
        plain = checkpoint_of((msg("not marked", "system"),), seqs[1], head.epoch, "m", T0)
        with pytest.raises(InvalidMessageError):
            await cps.save_checkpoint(KEY, plain, expected_version=0)
        bad_role = checkpoint_of(
            (ChatMessage("robot", "x", metadata={"chatlayers": {"summary": True}}),),
            seqs[1],
            head.epoch,
            "m",
            T0,
        )
        with pytest.raises(InvalidMessageError):
            await cps.save_checkpoint(KEY, bad_role, expected_version=0)
        assert await cps.load_checkpoint(KEY) is None

    async def test_checkpoint_is_never_a_message(self, store: ChatStorage) -> None:
        cps = need(store, CheckpointStorage)
        await self._saved_history(store)
        before_fetch = await store.fetch(KEY)
        before_all = await store.fetch_all_chats(KEY.user_id, KEY.session_id)
        listable = find_ability(store, ListableStorage)
        before_keys = await listable.list_keys() if listable is not None else None
        head = await cps.head(KEY)
        made = checkpoint_of((summary_message("gist"),), head.last_seq, head.epoch, "m", T0)
        assert await cps.save_checkpoint(KEY, made, expected_version=0) is not None
        assert await store.fetch(KEY) == before_fetch
        assert await store.fetch(KEY, limit=2) == before_fetch[-2:]
        assert await store.fetch_all_chats(KEY.user_id, KEY.session_id) == before_all
        assert (await cps.fetch_since(KEY, 0)).messages == tuple(before_fetch)
        assert (await cps.head(KEY)).last_seq == head.last_seq
        if listable is not None:
            assert await listable.list_keys() == before_keys

    async def test_checkpoint_erased_by_delete_and_delete_user(self, store: ChatStorage) -> None:
        cps = need(store, CheckpointStorage)
        keys = [KEY, OTHER, ChatKey("user-1", "session-2", "agent-1")]
        for key in keys:
            await self._saved_history(store, key)
            head = await cps.head(key)
            made = checkpoint_of((summary_message("g"),), head.last_seq, head.epoch, "m", T0)
            assert await cps.save_checkpoint(key, made, expected_version=0) is not None
        await store.delete(KEY)
        assert await cps.load_checkpoint(KEY) is None
        assert (await cps.head(KEY)).checkpoint_version == 0
        assert await cps.load_checkpoint(OTHER) is not None
        survivor = ChatKey("user-2", "session-1", "agent-1")
        await self._saved_history(store, survivor)
        head = await cps.head(survivor)
        made = checkpoint_of((summary_message("g"),), head.last_seq, head.epoch, "m", T0)
        assert await cps.save_checkpoint(survivor, made, expected_version=0) is not None
        await store.delete_user("user-1")
        for key in keys:
            assert await cps.load_checkpoint(key) is None
            assert (await cps.head(key)).checkpoint_version == 0
        assert await cps.load_checkpoint(survivor) is not None

    async def test_leases(self, store: ChatStorage) -> None:
        cps = need(store, CheckpointStorage)
        assert await cps.acquire_lease(KEY, "worker-a", 30.0) is True
        assert await cps.acquire_lease(KEY, "worker-b", 30.0) is False
        assert await cps.acquire_lease(KEY, "worker-a", 30.0) is True  # extends its own
        assert await cps.acquire_lease(OTHER, "worker-b", 30.0) is True  # per key
        await cps.release_lease(KEY, "worker-b")  # not the holder: a no-op
        assert await cps.acquire_lease(KEY, "worker-b", 30.0) is False
        await cps.release_lease(KEY, "worker-a")
        assert await cps.acquire_lease(KEY, "worker-b", 30.0) is True
        for owner, ttl in (("", 5.0), ("w", 0), ("w", -1.0)):
            with pytest.raises(InvalidArgumentError):
                await cps.acquire_lease(KEY, owner, ttl)

    async def test_lease_expires_on_the_clock(
        self, harness: StoreHarness, make_stack: MakeStack
    ) -> None:
        if harness.clock_option is None:
            pytest.skip("the store takes no clock")
        clock = FakeClock(time.time())
        store = await stack_with(make_stack, **{harness.clock_option: clock})
        cps = need(store, CheckpointStorage)
        assert await cps.acquire_lease(KEY, "worker-a", 10.0)
        clock.advance(9.0)
        assert not await cps.acquire_lease(KEY, "worker-b", 10.0)
        clock.advance(2.0)
        assert await cps.acquire_lease(KEY, "worker-b", 10.0)
        assert not await cps.acquire_lease(KEY, "worker-a", 10.0)

    # --- ReplaceableStorage --------------------------------------------------------------

    async def test_replace_is_atomic_and_starts_a_new_epoch(self, store: ChatStorage) -> None:
        rep = need(store, ReplaceableStorage)
        seq = find_ability(store, SequencedStorage)
        cps = find_ability(store, CheckpointStorage)
        await store.save_messages(KEY, [msg("old 1"), msg("old 2", "assistant")])
        await store.save(OTHER, msg("other agent"))
        before = await seq.head(KEY) if seq is not None else None
        if cps is not None and before is not None:
            made = checkpoint_of((summary_message("g"),), before.last_seq, before.epoch, "m", T0)
            assert await cps.save_checkpoint(KEY, made, expected_version=0) is not None
        new = [msg("be brief", "system"), msg("new 1"), msg("new 2", "assistant")]
        stored = await rep.replace(KEY, new)
        assert [m.id for m in stored] == [m.id for m in new]
        assert await store.fetch(KEY) == stored
        assert texts(await store.fetch(OTHER)) == ["other agent"]
        if seq is not None and before is not None:
            after = await seq.head(KEY)
            assert after.epoch
            assert after.epoch != before.epoch
            assert list((await seq.fetch_since(KEY, 0)).messages) == stored
        if cps is not None:
            assert await cps.load_checkpoint(KEY) is None
            assert (await cps.head(KEY)).checkpoint_version == 0

    async def test_replace_with_an_invalid_history_changes_nothing(
        self, store: ChatStorage
    ) -> None:
        rep = need(store, ReplaceableStorage)
        seq = find_ability(store, SequencedStorage)
        await store.save_messages(KEY, [msg("kept"), msg("also kept", "assistant")])
        before = await seq.head(KEY) if seq is not None else None
        orphan = [msg("q"), ChatMessage("tool", "result", tool_call_id="nope")]
        bad_role = [ChatMessage("robot", "x")]
        for history in (orphan, bad_role):
            with pytest.raises(InvalidMessageError):
                await rep.replace(KEY, history)
            assert texts(await store.fetch(KEY)) == ["kept", "also kept"]
        if seq is not None:
            assert await seq.head(KEY) == before
        calls = [
            msg("q"),
            ChatMessage("assistant", None, (ToolCall("c1", "f", "{}"),)),
            ChatMessage("tool", "r", tool_call_id="c1"),
        ]
        assert len(await rep.replace(KEY, calls)) == 3
        # A record, like ``save``, may hold instruction messages mid-way.
        mid_system = [msg("q"), msg("new instructions", "system"), msg("a", "assistant")]
        assert [m.role for m in await rep.replace(KEY, mid_system)] == [
            "user",
            "system",
            "assistant",
        ]
        assert await rep.replace(KEY, []) == []
        assert await store.fetch(KEY) == []

    async def test_save_messages_if(self, store: ChatStorage) -> None:
        rep = need(store, ReplaceableStorage)
        seq = need(store, SequencedStorage)
        empty = (await seq.head(KEY)).version
        first = await rep.save_messages_if(KEY, [msg("first")], expected_version=empty)
        assert texts(first) == ["first"]
        with pytest.raises(ConflictError):
            await rep.save_messages_if(KEY, [msg("stale")], expected_version=empty)
        current = (await seq.head(KEY)).version
        await store.save(KEY, msg("someone else"))
        with pytest.raises(ConflictError):
            await rep.save_messages_if(KEY, [msg("lost"), msg("race")], expected_version=current)
        assert texts(await store.fetch(KEY)) == ["first", "someone else"]
        now = (await seq.head(KEY)).version
        more = await rep.save_messages_if(
            KEY, [msg("won", "assistant"), msg("too")], expected_version=now
        )
        assert texts(more) == ["won", "too"]
        with pytest.raises(InvalidMessageError):
            await rep.save_messages_if(
                KEY, [ChatMessage("robot", "x")], expected_version=(await seq.head(KEY)).version
            )
        assert texts(await store.fetch(KEY)) == ["first", "someone else", "won", "too"]

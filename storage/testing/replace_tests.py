"""Compare-and-replace tests of the conformance kit: ``replace(..., expected_version=...)``
never erases a message another writer appended after the version was read.

Each runs on every layering, with the other writer on a second store instance over the same
database when the store persists (the same instance otherwise).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from storage.abilities import ReplaceableStorage, SequencedStorage
from storage.adapters.rewrite import edit
from storage.errors import ConflictError
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage
from storage.testing.ability_tests import MakeStack, need
from storage.testing.harness import StoreHarness
from storage.testing.protocol_tests import KEY, msg

__all__ = ["ReplaceTests"]


def _texts(messages: list[ChatMessage]) -> list[str]:
    return [m.text for m in messages]


async def _other_writer(harness: StoreHarness, store: ChatStorage, make_stack: MakeStack) -> Any:
    """Another worker on the store's data: a second instance when it persists."""
    return await make_stack() if harness.persistent else store


class ReplaceTests:
    """``replace`` with an expected version, directly and through an adapter's edit."""

    async def test_replace_with_a_stale_version_changes_nothing(
        self, harness: StoreHarness, store: ChatStorage, make_stack: MakeStack
    ) -> None:
        rep = need(store, ReplaceableStorage)
        seq = need(store, SequencedStorage)
        empty = (await seq.head(KEY)).version
        first = await rep.replace(KEY, [msg("a"), msg("b", "assistant")], expected_version=empty)
        assert _texts(first) == ["a", "b"]
        read = (await seq.head(KEY)).version
        other = await _other_writer(harness, store, make_stack)
        await other.save(KEY, msg("appended after the read"))
        with pytest.raises(ConflictError):
            await rep.replace(KEY, [msg("edited")], expected_version=read)
        assert _texts(await store.fetch(KEY)) == ["a", "b", "appended after the read"]
        for version in (empty, "", "no such version", 7):
            with pytest.raises(ConflictError):
                await rep.replace(KEY, [msg("edited")], expected_version=version)  # type: ignore[arg-type]
        assert _texts(await store.fetch(KEY)) == ["a", "b", "appended after the read"]
        current = (await seq.head(KEY)).version
        done = await rep.replace(KEY, [msg("edited")], expected_version=current)
        assert _texts(done) == ["edited"]
        assert _texts(await other.fetch(KEY)) == ["edited"]
        assert (await seq.head(KEY)).version != current
        # Without a version the replace is unconditional, as it always was.
        assert _texts(await rep.replace(KEY, [msg("again")])) == ["again"]

    async def test_an_append_between_an_edits_check_and_its_replace_is_never_erased(
        self,
        harness: StoreHarness,
        store: ChatStorage,
        make_stack: MakeStack,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """An adapter's edit (``storage.adapters.rewrite.edit``: OpenAI Agents' ``pop_item``,
        LlamaIndex's deletes) while another worker appends right before the ``replace`` call
        reaches the store: the edit retries on the new record, the append survives."""
        need(store, ReplaceableStorage)
        need(store, SequencedStorage)
        await store.save_messages(KEY, [msg("m0"), msg("m1", "assistant"), msg("m2")])
        other = await _other_writer(harness, store, make_stack)
        replace: Callable[..., Awaitable[list[ChatMessage]]] = store.replace  # type: ignore[attr-defined]
        late = iter([msg("late", "assistant")])

        async def append_then_replace(key: ChatKey, messages: Any, **options: Any) -> Any:
            for message in late:  # once: the worker's append lands in the window
                await other.save(key, message)
            return await replace(key, messages, **options)

        monkeypatch.setattr(store, "replace", append_then_replace)
        doomed = (await store.fetch(KEY))[1].id

        def drop_m1(record: list[ChatMessage]) -> list[ChatMessage] | None:
            return [m for m in record if m.id != doomed]

        await edit(store, KEY, drop_m1)
        assert _texts(await other.fetch(KEY)) == ["m0", "m2", "late"]

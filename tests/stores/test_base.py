"""The store base: one template per public method over the store's hooks.

A store offers an optional ability exactly when it implements the ability's hooks; the
templates check keys and arguments, refuse a closed store and translate driver errors,
whether a hook returns its result or an awaitable of it.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from storage.abilities import (
    ABILITIES,
    Head,
    ReplaceableStorage,
    SearchableStorage,
    SearchHit,
    SequencedStorage,
    Tail,
    find_ability,
)
from storage.errors import (
    ConflictError,
    InvalidArgumentError,
    InvalidKeyError,
    StorageUnavailableError,
)
from storage.message import ChatKey, ChatMessage
from storage.stores.base import ABILITY_HOOKS, EMPTY_HEAD, BaseStore
from storage.stores.jsonl import JsonlChatStorage
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage

pytestmark = pytest.mark.anyio
KEY = ChatKey("u", "s", "a")


class DriverError(Exception):
    """What the toy store's driver raises."""


class CoreOnly(BaseStore):
    """A third-party store implementing only the ``ChatStorage`` hooks."""

    scheme = "core"
    driver_errors = (DriverError,)

    def __init__(self) -> None:
        self.messages: list[ChatMessage] = []

    def _save(self, key: ChatKey, batch: list[ChatMessage]) -> list[ChatMessage]:
        self.messages += batch
        return batch

    async def _fetch(self, key: ChatKey, limit: int | None) -> list[ChatMessage]:
        return list(self.messages)

    def _list_keys(self, user_id: str | None, session_id: str | None) -> Iterable[ChatKey]:
        return [KEY] if self.messages else []


class Sequenced(CoreOnly):
    """Adds heads and tails: a sync ``_head``, an async ``_fetch_since`` that fails."""

    def _head(self, key: ChatKey) -> Head:
        return Head(len(self.messages), "e") if self.messages else EMPTY_HEAD

    async def _fetch_since(self, key: ChatKey, after: int) -> Tail:
        raise DriverError("connection reset")

    async def vacuum(self) -> None:
        """A maintenance method outside the template."""
        raise DriverError("disk gone")


def test_an_ability_is_offered_exactly_when_its_hooks_are_implemented() -> None:
    core, sequenced = CoreOnly(), Sequenced()
    offered = [a.__name__ for a in ABILITIES if find_ability(core, a) is not None]
    assert offered == ["DescribableStorage", "ListableStorage"]
    assert find_ability(sequenced, SequencedStorage) is sequenced
    assert find_ability(sequenced, SearchableStorage) is None
    assert CoreOnly.search is None  # hidden: a caller can never reach NotImplementedError

    class Searching(Sequenced):
        def _search(
            self, user_id: str, query: str, terms: list[str], limit: int
        ) -> list[SearchHit]:
            return []

    assert find_ability(Searching(), SearchableStorage) is not None
    assert find_ability(Searching(), SequencedStorage) is not None

    class Hiding(Searching):
        search = None  # a subclass may hide what its base offers

    assert find_ability(Hiding(), SearchableStorage) is None
    assert find_ability(Hiding(), SequencedStorage) is not None


def test_a_store_implementing_part_of_an_ability_is_refused_when_its_class_is_made() -> None:
    with pytest.raises(TypeError, match="part of ReplaceableStorage: add _save_messages_if"):

        class Half(CoreOnly):
            def _replace(
                self, key: ChatKey, batch: list[ChatMessage], expected_version: str | None
            ) -> list[ChatMessage]:
                return batch


def test_every_built_in_store_implements_every_hook() -> None:
    from storage.stores.postgres import PostgresChatStorage
    from storage.stores.redis import RedisChatStorage

    stores = (
        InMemoryChatStorage,
        SQLiteChatStorage,
        JsonlChatStorage,
        RedisChatStorage,
        PostgresChatStorage,
    )
    for store in stores:
        for pairs in ABILITY_HOOKS.values():
            for public, hook in pairs:
                assert getattr(store, public) is getattr(BaseStore, public)  # the template
                assert getattr(store, hook) is not getattr(BaseStore, hook), (store, hook)


async def test_templates_check_keys_and_arguments_before_any_hook() -> None:
    store = Sequenced()
    with pytest.raises(InvalidKeyError):
        await store.head(("u", "s", "a"))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await store.fetch_since(KEY, -1)
    with pytest.raises(InvalidArgumentError):
        await store.fetch(KEY, limit=-1)
    assert await store.head(KEY) == EMPTY_HEAD  # a hook returning its result
    await store.save(KEY, ChatMessage("user", "hi"))
    assert (await store.head(KEY)).last_seq == 1
    assert await store.list_keys() == [KEY]


async def test_driver_errors_become_unavailable_in_templates_and_maintenance() -> None:
    store = Sequenced()
    with pytest.raises(StorageUnavailableError, match="connection reset") as caught:
        await store.fetch_since(KEY, 0)  # an async hook
    assert isinstance(caught.value.__cause__, DriverError)
    with pytest.raises(StorageUnavailableError, match="disk gone"):
        await store.vacuum()  # a public coroutine the store added itself


async def test_a_closed_store_refuses_every_template() -> None:
    store = Sequenced()
    await store.aclose()
    for call in (
        store.head(KEY),
        store.fetch(KEY),
        store.save(KEY, ChatMessage("user", "x")),
        store.list_keys(),
    ):
        with pytest.raises(StorageUnavailableError, match="closed"):
            await call


async def test_replace_refuses_a_version_no_head_has() -> None:
    store = InMemoryChatStorage()
    replaceable = find_ability(store, ReplaceableStorage)
    assert replaceable is not None
    await store.save(KEY, ChatMessage("user", "kept"))
    for version in (3, b".0", "", ".0"):
        with pytest.raises(ConflictError):
            await replaceable.replace(KEY, [], expected_version=version)  # type: ignore[arg-type]
    assert [m.text for m in await store.fetch(KEY)] == ["kept"]

"""Every layer forwards every protocol method to its inner store; the public API is pinned."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Generic, Protocol

import pytest

import storage
from storage.abilities import (
    ABILITIES,
    ConversationRecord,
    DescribableStorage,
    Head,
    ListableStorage,
    SearchHit,
    SessionPage,
    SummaryCheckpoint,
    Tail,
    find_ability,
)
from storage.config import Stack
from storage.layers.summarizing import SummarizingChatStorage
from storage.layers.transforming import TransformingChatStorage
from storage.message import AgentMessage, ChatKey, ChatMessage
from storage.protocol import PROTOCOL_METHODS, ChatStorage, ChatStorageWrapper

pytestmark = pytest.mark.anyio
KEY = ChatKey("u", "s", "a")


class Recorder:
    """An inner store that records which protocol methods were called."""

    def __init__(self) -> None:
        self.called: list[str] = []

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        self.called.append("save")
        return [message]

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        self.called.append("save_messages")
        return list(messages)

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        self.called.append("fetch")
        return []

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[AgentMessage]:
        self.called.append("fetch_all_chats")
        return []

    async def delete(self, key: ChatKey) -> None:
        self.called.append("delete")

    async def delete_user(self, user_id: str) -> None:
        self.called.append("delete_user")

    async def aclose(self) -> None:
        self.called.append("aclose")

    async def __aenter__(self) -> Recorder:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _noop_summarizer(history: list[ChatMessage], keep_last: int) -> list[ChatMessage]:
    return history


def _encrypting(inner: Any) -> Any:
    from storage.layers.encrypting import EncryptingChatStorage, StoreKeyring, new_master_key
    from storage.stores.memory import InMemoryChatStorage

    keyring = StoreKeyring(InMemoryChatStorage(), "memory://")
    return EncryptingChatStorage(inner, keys=new_master_key(), keyring=keyring)


LAYERS: dict[str, Any] = {
    "stack": lambda inner: Stack(inner),
    "encrypting": _encrypting,
    "transforming": lambda inner: TransformingChatStorage(inner, lambda m, k: m),
    "summarizing": lambda inner: SummarizingChatStorage(inner, _noop_summarizer),
}


def layer_classes() -> list[type]:
    """Every ChatStorageWrapper subclass defined in the library (imported modules)."""
    found: list[type] = []
    pending = list(ChatStorageWrapper.__subclasses__())
    while pending:
        cls = pending.pop()
        if cls.__module__.startswith("storage."):
            found.append(cls)
        pending += cls.__subclasses__()
    return found


def test_every_layer_class_is_covered() -> None:
    import storage.layers

    for module in pkgutil.walk_packages(storage.layers.__path__, "storage.layers."):
        importlib.import_module(module.name)  # every layer class defined in storage/layers
    covered = {type(make(Recorder())) for make in LAYERS.values()}
    assert set(layer_classes()) <= covered


# What each protocol call may reach below (a layer may save one message as a batch of one).
REACHES = {name: {name} for name in PROTOCOL_METHODS} | {"save": {"save", "save_messages"}}
PROTOCOL_CALLS: dict[str, Any] = {
    "save": lambda s: s.save(KEY, ChatMessage("user", "x")),
    "save_messages": lambda s: s.save_messages(KEY, [ChatMessage("user", "y")]),
    "fetch": lambda s: s.fetch(KEY),
    "fetch_all_chats": lambda s: s.fetch_all_chats("u", "s"),
    "delete": lambda s: s.delete(KEY),
    "delete_user": lambda s: s.delete_user("u"),
    "aclose": lambda s: s.aclose(),
}


@pytest.mark.parametrize("layer", sorted(LAYERS))
async def test_layer_forwards_every_protocol_method(layer: str) -> None:
    inner = Recorder()
    wrapped = LAYERS[layer](inner)
    assert isinstance(wrapped, ChatStorage)
    assert set(PROTOCOL_CALLS) == set(PROTOCOL_METHODS)
    for name in PROTOCOL_METHODS:
        inner.called.clear()
        await PROTOCOL_CALLS[name](wrapped)
        assert inner.called, f"{layer}: {name} never reached the inner store"
        assert set(inner.called) <= REACHES[name], (layer, name, inner.called)


class AbilityRecorder(Recorder):
    """A Recorder with every optional ability, recording each call."""

    async def list_keys(
        self, user_id: str | None = None, session_id: str | None = None
    ) -> list[ChatKey]:
        self.called.append("list_keys")
        return []

    async def head(self, key: ChatKey) -> Head:
        self.called.append("head")
        return Head(0, "")

    async def fetch_since(self, key: ChatKey, after: int) -> Tail:
        self.called.append("fetch_since")
        return Tail(Head(0, ""), (), ())

    async def load_checkpoint(self, key: ChatKey) -> SummaryCheckpoint | None:
        self.called.append("load_checkpoint")
        return None

    async def save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, *, expected_version: int
    ) -> SummaryCheckpoint | None:
        self.called.append("save_checkpoint")
        return checkpoint

    async def acquire_lease(self, key: ChatKey, owner: str, ttl: float) -> bool:
        self.called.append("acquire_lease")
        return True

    async def release_lease(self, key: ChatKey, owner: str) -> None:
        self.called.append("release_lease")

    async def replace(
        self,
        key: ChatKey,
        messages: Sequence[ChatMessage],
        *,
        expected_version: str | None = None,
    ) -> list[ChatMessage]:
        self.called.append("replace")
        return list(messages)

    async def save_messages_if(
        self, key: ChatKey, messages: Sequence[ChatMessage], *, expected_version: str
    ) -> list[ChatMessage]:
        self.called.append("save_messages_if")
        return list(messages)

    async def list_sessions(
        self, user_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> SessionPage:
        self.called.append("list_sessions")
        return SessionPage((), None)

    async def search(self, user_id: str, query: str, *, limit: int = 20) -> list[SearchHit]:
        self.called.append("search")
        return []

    async def save_record(self, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
        self.called.append("save_record")
        return record

    async def fetch_records(
        self, key: ChatKey, *, kind: str | None = None
    ) -> list[ConversationRecord]:
        self.called.append("fetch_records")
        return []

    async def purge(self, *, now: datetime | None = None) -> int:
        self.called.append("purge")
        return 0

    def describe(self) -> str:
        return "recorder://"


SUMMARY = ChatMessage("system", "summary", metadata={"chatlayers": {"summary": True}})
# One call of each ability method, with arguments every layer accepts.
ABILITY_CALLS: dict[str, Any] = {
    "list_keys": lambda s: s.list_keys(),
    "head": lambda s: s.head(KEY),
    "fetch_since": lambda s: s.fetch_since(KEY, 0),
    "load_checkpoint": lambda s: s.load_checkpoint(KEY),
    "save_checkpoint": lambda s: s.save_checkpoint(
        KEY,
        SummaryCheckpoint((SUMMARY,), 1, "e", "manual", datetime.now(UTC)),
        expected_version=0,
    ),
    "acquire_lease": lambda s: s.acquire_lease(KEY, "me", 5.0),
    "release_lease": lambda s: s.release_lease(KEY, "me"),
    "replace": lambda s: s.replace(KEY, [ChatMessage("user", "r")]),
    "save_messages_if": lambda s: s.save_messages_if(
        KEY, [ChatMessage("user", "c")], expected_version=".0"
    ),
    "list_sessions": lambda s: s.list_sessions("u"),
    "search": lambda s: s.search("u", "words"),
    "save_record": lambda s: s.save_record(KEY, ConversationRecord("status")),
    "fetch_records": lambda s: s.fetch_records(KEY),
    "purge": lambda s: s.purge(),
}


def ability_methods(ability: type) -> list[str]:
    """The methods a protocol of ``storage.abilities`` declares (its own and inherited)."""
    names: list[str] = []
    for cls in ability.__mro__:
        if cls in (Protocol, Generic, object) or not getattr(cls, "_is_protocol", False):
            continue
        names += [n for n, v in vars(cls).items() if not n.startswith("_") and callable(v)]
    return sorted(set(names))


def test_ability_calls_cover_every_ability_method() -> None:
    declared = {m for a in ABILITIES if a is not DescribableStorage for m in ability_methods(a)}
    assert declared == set(ABILITY_CALLS)


@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize(
    "ability", [a for a in ABILITIES if a is not DescribableStorage], ids=lambda a: a.__name__
)
async def test_layer_forwards_each_ability_explicitly_or_hides_it(
    layer: str, ability: type
) -> None:
    inner = AbilityRecorder()
    wrapped = LAYERS[layer](inner)
    if layer == "encrypting":  # its bookkeeping below (keyring records, a user's first key)
        await wrapped.save(KEY, ChatMessage("user", "first"))
    cls = type(wrapped)
    assert "__getattr__" not in {n for c in cls.__mro__ for n in vars(c)}, "no implicit delegation"
    methods = ability_methods(ability)
    present = [m for m in methods if callable(getattr(cls, m, None))]
    if find_ability(wrapped, ability) is None:
        # Absent: the layer has none of the ability's methods (a partial ability would let a
        # caller reach the inner store around the layer), except those of a smaller ability
        # it does have (the summarizing layer forwards SequencedStorage, not checkpoints).
        had = {
            method
            for other in ABILITIES
            if find_ability(wrapped, other) is not None
            for method in ability_methods(other)
        }
        partial = [m for m in present if m not in had]
        assert partial == [], f"{cls.__name__} has part of {ability.__name__}: {partial}"
        return
    assert present == methods
    for name in methods:
        owner = next(c for c in cls.__mro__ if name in vars(c))
        assert owner.__module__.startswith("storage."), (name, owner)
        assert inspect.iscoroutinefunction(getattr(cls, name)), name
        inner.called.clear()
        await ABILITY_CALLS[name](wrapped)
        assert inner.called == [name], (name, inner.called)


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layer_hides_abilities_its_inner_store_lacks(layer: str) -> None:
    wrapped = LAYERS[layer](Recorder())
    for ability in ABILITIES:
        if ability in (DescribableStorage, ListableStorage):
            continue
        assert find_ability(wrapped, ability) is None, ability.__name__


def test_wrapper_defines_every_protocol_method_itself() -> None:
    for name in PROTOCOL_METHODS:
        assert name in ChatStorageWrapper.__dict__, name
        assert inspect.iscoroutinefunction(getattr(ChatStorageWrapper, name))


EXPORTED = {
    "AgentMessage",
    "ChatKey",
    "ChatMessage",
    "ChatStorage",
    "ChatStorageError",
    "ChatStorageWrapper",
    "ConfigError",
    "CorruptRecordError",
    "EncryptingChatStorage",
    "InMemoryChatStorage",
    "InvalidKeyError",
    "InvalidMessageError",
    "JsonlChatStorage",
    "PIIScrubber",
    "PostgresChatStorage",
    "RedisChatStorage",
    "SQLiteChatStorage",
    "StorageUnavailableError",
    "SummarizerError",
    "SummarizingChatStorage",
    "SyncChatStorage",
    "ToolCall",
    "TransformingChatStorage",
    "open_storage",
    "validate_history",
}


def test_public_api_is_pinned() -> None:
    assert set(storage.__all__) == EXPORTED


def test_errors_form_one_tree() -> None:
    for name in (
        "ConfigError",
        "CorruptRecordError",
        "InvalidKeyError",
        "InvalidMessageError",
        "StorageUnavailableError",
        "SummarizerError",
    ):
        assert issubclass(getattr(storage, name), storage.ChatStorageError)

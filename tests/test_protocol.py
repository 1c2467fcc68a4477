"""Every layer forwards every protocol method to its inner store, declares every ability and
reaches the inner store exactly as declared; the public API is pinned."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Generic, Protocol, Self

import pytest

import storage
from storage.abilities import (
    ABILITIES,
    AbilityForwarders,
    ConversationRecord,
    DescribableStorage,
    Forward,
    Head,
    Hidden,
    ListableStorage,
    SearchHit,
    SessionPage,
    SummaryCheckpoint,
    Tail,
    Timeline,
    ViewProvenance,
    find_ability,
)
from storage.abilities.timeline import AsOf
from storage.config import Stack
from storage.config.registry import Registry
from storage.layers.otel import TelemetryChatStorage
from storage.layers.payload import PayloadLayer
from storage.layers.strict import StrictViewChatStorage
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

    async def __aenter__(self) -> Self:
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


def _mirroring(inner: Any) -> Any:
    from storage.layers.mirroring import MirrorChatStorage
    from storage.stores.memory import InMemoryChatStorage

    return MirrorChatStorage(inner, secondary=AbilityRecorder(), journal=InMemoryChatStorage())


LAYERS: dict[str, Any] = {
    "stack": lambda inner: Stack(inner),
    "mirror": _mirroring,
    "encrypting": _encrypting,
    "payload": PayloadLayer,
    "transforming": lambda inner: TransformingChatStorage(inner, lambda m, k: m),
    "summarizing": lambda inner: SummarizingChatStorage(inner, _noop_summarizer),
    "strict": lambda inner: StrictViewChatStorage(inner),
    "otel": lambda inner: TelemetryChatStorage(inner, secret="s"),
}


def layer_classes() -> list[type]:
    """Every ChatStorageWrapper subclass defined in the library: every module of
    storage/layers imported, and every layer the registry builds."""
    import storage.layers
    from storage.stores.memory import InMemoryChatStorage

    for module in pkgutil.walk_packages(storage.layers.__path__, "storage.layers."):
        importlib.import_module(module.name)
    registry = Registry(entry_points=False)
    for name in registry.names("layers"):
        factory = registry.resolve("layers", name)
        if not isinstance(factory, type):  # a function building a layer (scrub)
            factory(InMemoryChatStorage(), secret="s")
    found: list[type] = []
    pending = list(ChatStorageWrapper.__subclasses__())
    while pending:
        cls = pending.pop()
        if cls.__module__.startswith("storage."):
            found.append(cls)
        pending += cls.__subclasses__()
    return found


def test_every_layer_class_is_covered() -> None:
    covered = {type(make(Recorder())) for make in LAYERS.values()}
    assert set(layer_classes()) <= covered


def test_every_layer_class_classifies_every_ability_exactly_once() -> None:
    """A layer that says nothing about an ability cannot be made (see
    tests/abilities/test_declaring.py); here: every library layer says it in its own class."""
    classes = layer_classes()
    assert {c.__name__ for c in classes} >= {
        "EncryptingChatStorage",
        "PayloadLayer",
        "Stack",
        "SummarizingChatStorage",
        "TransformingChatStorage",
    }
    for cls in classes:
        assert "abilities" in vars(cls), f"{cls.__name__} declares no abilities of its own"
        declared = cls.__chatlayers_abilities__  # type: ignore[attr-defined]
        assert declared is vars(cls)["abilities"]
        named = [*declared.passes, *declared.transforms, *declared.hides]
        assert sorted(named, key=ABILITIES.index) == list(ABILITIES), cls.__name__


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

    async def fork(self, key: ChatKey, new_key: ChatKey, *, at: str | None = None) -> int:
        self.called.append("fork")
        return 0

    async def rewind(self, key: ChatKey, to: str) -> int:
        self.called.append("rewind")
        return 0

    async def fetch_as_of(self, key: ChatKey, at: AsOf) -> list[ChatMessage]:
        self.called.append("fetch_as_of")
        return []

    async def fetch_timeline(self, key: ChatKey) -> Timeline:
        self.called.append("fetch_timeline")
        return Timeline(Head(0, ""), (), ())

    async def provenance(self, key: ChatKey, message_id: str) -> ViewProvenance | None:
        self.called.append("provenance")
        return None

    def describe(self) -> str:
        return "recorder://"


SUMMARY = ChatMessage("system", "summary", metadata={"chatlayers": {"summary": True}})
# Reads a layer makes of the store below after the call itself: a mirror finds the message
# a saved checkpoint covers, to cover the same one on its secondary.
# After a fork, it copies the fork as the primary made it (the primary read as migrate does).
EXTRA_READS: dict[str, set[str]] = {
    "mirror": {"fetch_since", "head", "fetch_timeline", "load_checkpoint", "fetch_records"}
}
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
    "fork": lambda s: s.fork(KEY, ChatKey("u", "s2", "a")),
    "rewind": lambda s: s.rewind(KEY, "m1"),
    "fetch_as_of": lambda s: s.fetch_as_of(KEY, 0),
    "fetch_timeline": lambda s: s.fetch_timeline(KEY),
    "provenance": lambda s: s.provenance(KEY, "m1"),
}
# A transformed method that reaches other methods below on purpose: a payload layer forks
# by copying through itself (each message re-sealed under the new key); the summarizing
# layer rebuilds a reply's view from its provenance record.
INSTEAD: dict[tuple[str, str], list[str]] = {
    ("payload", "fork"): ["fetch_timeline", "save_messages_if"],
    ("encrypting", "fork"): ["fetch_timeline", "save_messages_if"],
    ("summarizing", "provenance"): ["fetch_records"],
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
async def test_layer_reaches_each_ability_as_declared(layer: str, ability: type) -> None:
    inner = AbilityRecorder()
    wrapped = LAYERS[layer](inner)
    if layer == "encrypting":  # its bookkeeping below (keyring records, a user's first key)
        await wrapped.save(KEY, ChatMessage("user", "first"))
    cls = type(wrapped)
    assert "__getattr__" not in {n for c in cls.__mro__ for n in vars(c)}, "no implicit delegation"
    methods = ability_methods(ability)
    own = [m for m in methods if m in vars(ability)]
    if cls.__chatlayers_abilities__.kind(ability) == "hides":
        # Hidden: none of its own methods is reachable (a partial ability would let a
        # caller reach the inner store around the layer), not even by isinstance.
        assert find_ability(wrapped, ability) is None
        assert not isinstance(wrapped, ability)
        for name in own:
            assert isinstance(inspect.getattr_static(cls, name), Hidden), name
            assert not hasattr(wrapped, name), name
            with pytest.raises(AttributeError, match=f"hides {ability.__name__}"):
                getattr(wrapped, name)
        return
    assert find_ability(wrapped, ability) is wrapped
    assert isinstance(wrapped, ability)
    for name in methods:
        found = inspect.getattr_static(cls, name)
        assert isinstance(found, Forward) or inspect.iscoroutinefunction(found), name
        inner.called.clear()
        await ABILITY_CALLS[name](wrapped)
        instead = INSTEAD.get((layer, name))
        if instead is not None:
            assert inner.called == instead, (name, inner.called)
            continue
        assert inner.called[:1] == [name], (name, inner.called)
        assert set(inner.called[1:]) <= EXTRA_READS.get(layer, set()), (name, inner.called)


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layer_hides_abilities_its_inner_store_lacks(layer: str) -> None:
    wrapped = LAYERS[layer](Recorder())
    for ability in ABILITIES:
        if ability in (DescribableStorage, ListableStorage):
            continue
        assert find_ability(wrapped, ability) is None, ability.__name__


def test_every_protocol_method_has_exactly_one_forwarder() -> None:
    """The wrapper forwards each ChatStorage method, AbilityForwarders each ability method:
    one forwarder each, made from that very method (so a new ability cannot miss one)."""
    carried = [
        value
        for holder in (ChatStorageWrapper, AbilityForwarders)
        for value in vars(holder).values()
        if isinstance(value, Forward)
    ]
    methods = [getattr(ChatStorage, name) for name in PROTOCOL_METHODS] + [
        vars(ability)[name]
        for ability in ABILITIES
        for name in ability_methods(ability)
        if name in vars(ability)
    ]
    assert sorted(f.method.__qualname__ for f in carried) == sorted(m.__qualname__ for m in methods)
    assert all(any(f.method is m for f in carried) for m in methods)
    assert all(f.name == f.method.__name__ for f in carried)


EXPORTED = {
    "AgentMessage",
    "ChatKey",
    "ChatMessage",
    "ChatStorage",
    "ChatStorageError",
    "ChatStorageWrapper",
    "ConfigError",
    "ConflictError",
    "CorruptRecordError",
    "EncryptingChatStorage",
    "InMemoryChatStorage",
    "InvalidArgumentError",
    "InvalidKeyError",
    "InvalidMessageError",
    "JsonlChatStorage",
    "PIIScrubber",
    "PostgresChatStorage",
    "RedisChatStorage",
    "SQLiteChatStorage",
    "SchemaVersionError",
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

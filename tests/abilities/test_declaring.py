"""Declared abilities: a layer says what it does with every ability, checked when its class is
made; ``find_ability`` and ``isinstance`` read the declarations."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import pytest

from storage.abilities import (
    ABILITIES,
    Abilities,
    CheckpointStorage,
    DescribableStorage,
    ListableStorage,
    RecordStorage,
    ReplaceableStorage,
    RetentionStorage,
    SearchableStorage,
    SearchHit,
    SequencedStorage,
    SessionListing,
    Tail,
    find_ability,
    forward,
)
from storage.layers.encrypting import EncryptingChatStorage, StoreKeyring, new_master_key
from storage.layers.summarizing import SummarizingChatStorage
from storage.layers.transforming import TransformingChatStorage
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorageWrapper
from storage.stores.memory import InMemoryChatStorage

pytestmark = pytest.mark.anyio
KEY = ChatKey("u", "s", "a")
REST = tuple(a for a in ABILITIES if a not in (DescribableStorage, SearchableStorage))


def declared(
    *, passes: Sequence[type] = (), transforms: Sequence[type] = (), hides: Sequence[type] = ()
) -> Abilities:
    return Abilities(passes=passes, transforms=transforms, hides=hides)


def make_layer(abilities: Abilities, **body: Any) -> type:
    return type("Probe", (ChatStorageWrapper,), {"abilities": abilities, **body})


async def _search(self: Any, user_id: str, query: str, *, limit: int = 20) -> list[SearchHit]:
    return []


def test_an_ability_left_out_is_refused_naming_it() -> None:
    with pytest.raises(TypeError, match="does not say what it does with SearchableStorage"):
        make_layer(declared(passes=REST, transforms=(DescribableStorage,)))


def test_an_ability_named_twice_is_refused() -> None:
    with pytest.raises(TypeError, match="declares SearchableStorage more than once"):
        make_layer(
            declared(
                passes=(*REST, SearchableStorage),
                transforms=(DescribableStorage,),
                hides=(SearchableStorage,),
            )
        )


def test_a_transformed_ability_must_be_implemented_method_by_method() -> None:
    with pytest.raises(TypeError, match=r"transforms SearchableStorage but does not define search"):
        make_layer(declared(passes=REST, transforms=(DescribableStorage, SearchableStorage)))
    probe = make_layer(
        declared(passes=REST, transforms=(DescribableStorage, SearchableStorage)), search=_search
    )
    assert find_ability(probe(InMemoryChatStorage()), SearchableStorage) is not None


def test_a_passed_or_hidden_ability_defined_by_the_layer_is_refused() -> None:
    for kind in ("passes", "hides"):
        abilities = declared(
            passes=(*REST, SearchableStorage) if kind == "passes" else REST,
            transforms=(DescribableStorage,),
            hides=(SearchableStorage,) if kind == "hides" else (),
        )
        with pytest.raises(TypeError, match=f"{kind} SearchableStorage but defines search"):
            make_layer(abilities, search=_search)


def test_an_ability_cannot_be_offered_while_one_it_extends_is_hidden() -> None:
    others = tuple(a for a in REST if a is not SequencedStorage)
    with pytest.raises(TypeError, match="offers CheckpointStorage but hides SequencedStorage"):
        make_layer(
            declared(
                passes=others,
                transforms=(DescribableStorage,),
                hides=(SearchableStorage, SequencedStorage),
            )
        )


def test_a_forwarder_under_another_name_is_refused() -> None:
    with pytest.raises((TypeError, RuntimeError)) as caught:

        class Wrong(ChatStorageWrapper):
            fetch_since = forward(SequencedStorage.head)  # type: ignore[assignment]  # on purpose

    error = caught.value if isinstance(caught.value, TypeError) else caught.value.__cause__
    assert isinstance(error, TypeError)
    assert "under the method's own name, 'head'" in str(error)


async def test_hiding_is_total_and_names_the_ability() -> None:
    probe = make_layer(
        declared(passes=REST, transforms=(DescribableStorage,), hides=(SearchableStorage,))
    )
    layer = probe(InMemoryChatStorage())  # the store below can search
    assert find_ability(layer, SearchableStorage) is None
    assert not isinstance(layer, SearchableStorage)
    assert not hasattr(layer, "search")
    with pytest.raises(AttributeError, match="Probe hides SearchableStorage: it has no search"):
        await layer.search("u", "x")
    assert find_ability(layer, SessionListing) is layer


async def test_passes_puts_the_forwarder_over_a_base_implementation() -> None:
    """A layer that passes an ability its base class implements reaches the store directly:
    the transforming layer's reads are the inner store's own bound methods."""
    inner = InMemoryChatStorage()
    layer = TransformingChatStorage(inner, lambda m, k: m)
    for name in ("fetch", "fetch_all_chats", "head", "fetch_since", "load_checkpoint"):
        assert getattr(layer, name) == getattr(inner, name), name
    for name in ("search", "list_sessions", "fetch_records", "purge", "list_keys"):
        assert getattr(layer, name) == getattr(inner, name), name
    await layer.save(KEY, ChatMessage("user", "hi"))
    assert [m.text for m in (await layer.fetch_since(KEY, 0)).messages] == ["hi"]


async def test_a_forwarded_method_can_be_patched_on_an_instance_like_a_method() -> None:
    """Forwarders are non-data descriptors: ``mock.patch.object(layer, name)`` takes their
    place on that instance only, as it would for a method; a hidden one cannot be patched in."""
    from unittest import mock

    layer = TransformingChatStorage(InMemoryChatStorage(), lambda m, k: m)
    other = TransformingChatStorage(InMemoryChatStorage(), lambda m, k: m)
    with mock.patch.object(layer, "head", mock.AsyncMock(return_value="patched")):
        # (the mock returns a str where a Head is declared)
        assert await layer.head(KEY) == "patched"  # type: ignore[comparison-overlap]
        assert await other.head(KEY) != "patched"  # type: ignore[comparison-overlap]
    assert (await layer.head(KEY)).last_seq == 0  # the forwarder is back
    probe = make_layer(
        declared(passes=REST, transforms=(DescribableStorage,), hides=(SearchableStorage,))
    )(InMemoryChatStorage())
    with pytest.raises(AttributeError):
        probe.search = mock.AsyncMock()


def test_isinstance_follows_the_stack_rule() -> None:
    class Bare:  # a store with no optional ability
        async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
            return []

    over_bare = TransformingChatStorage(Bare(), lambda m, k: m)  # type: ignore[arg-type]
    over_memory = TransformingChatStorage(InMemoryChatStorage(), lambda m, k: m)
    assert not isinstance(over_bare, SequencedStorage)
    assert isinstance(over_memory, SequencedStorage)
    summarizing = SummarizingChatStorage(InMemoryChatStorage())
    assert isinstance(summarizing, SequencedStorage)
    assert not isinstance(summarizing, CheckpointStorage)  # it consumes checkpoints
    keyring = StoreKeyring(InMemoryChatStorage(), "memory://")
    encrypting = EncryptingChatStorage(
        InMemoryChatStorage(), keys=new_master_key(), keyring=keyring
    )
    assert not isinstance(encrypting, SearchableStorage)
    assert isinstance(encrypting, RecordStorage)


def test_a_subclass_without_a_declaration_keeps_its_parents() -> None:
    class Quiet(TransformingChatStorage):
        pass

    assert Quiet.__chatlayers_abilities__ == TransformingChatStorage.abilities  # type: ignore[attr-defined]

    class Plain(ChatStorageWrapper):  # the base's: listing only
        pass

    layer = Plain(InMemoryChatStorage())
    assert find_ability(layer, ListableStorage) is layer
    for ability in (SequencedStorage, ReplaceableStorage, RecordStorage, RetentionStorage):
        assert find_ability(layer, ability) is None, ability
        assert not hasattr(layer, ability_method(ability)), ability


def test_a_subclass_defining_an_ability_whole_transforms_it_and_partly_is_refused() -> None:
    class Searching(ChatStorageWrapper):
        search = _search

    assert Searching.__chatlayers_abilities__.kind(SearchableStorage) == "transforms"  # type: ignore[attr-defined]
    assert find_ability(Searching(InMemoryChatStorage()), SearchableStorage) is not None

    async def fetch_since(self: Any, key: ChatKey, after: int) -> Tail:
        raise AssertionError

    with pytest.raises(TypeError, match="defines fetch_since of SequencedStorage but not every"):
        type("Partly", (ChatStorageWrapper,), {"fetch_since": fetch_since})


def test_the_forward_mixins_of_earlier_releases_still_work() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        from storage.abilities import ForwardRecords, ForwardSessions
    assert any(issubclass(w.category, DeprecationWarning) for w in seen)

    class Legacy(ForwardSessions, ForwardRecords, ChatStorageWrapper):  # type: ignore[misc]
        pass

    layer = Legacy(InMemoryChatStorage())
    assert find_ability(layer, SessionListing) is layer
    assert find_ability(layer, RecordStorage) is layer
    assert find_ability(layer, SearchableStorage) is None
    with pytest.raises(ImportError):
        from storage.abilities import ForwardNothing  # noqa: F401


def ability_method(ability: type) -> str:
    return next(n for n in vars(ability) if not n.startswith("_") and callable(vars(ability)[n]))

"""Forwarders made from the protocols' own methods, and the one class that carries them.

``forward(SequencedStorage.head)`` is a descriptor named after the method it is made from:
``layer.head`` is ``layer.inner.head`` (the inner component's bound method, looked up in C:
no extra frame on the hot path), and mypy types ``layer.head(key)`` exactly as the
protocol's method, so a misspelled or mistyped forward cannot pass. Placing it under another
name is refused when the class is made.

:class:`AbilityForwarders` holds one forwarder per ability method, beside the protocols;
``ChatStorageWrapper`` inherits it. Whether a layer *uses* a forwarder is its declaration's
business (:mod:`storage.abilities.declaring`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, Generic, NoReturn, ParamSpec, TypeVar

from storage.abilities.protocols import (
    CheckpointStorage,
    DescribableStorage,
    ListableStorage,
    RecordStorage,
    ReplaceableStorage,
    RetentionStorage,
    SearchableStorage,
    SequencedStorage,
    SessionListing,
    TimeTravelStorage,
)

if TYPE_CHECKING:
    from typing import Self, overload

__all__ = ["AbilityForwarders", "Forward", "Hidden", "forward"]

P = ParamSpec("P")
R = TypeVar("R")


class Forward(Generic[P, R]):
    """``layer.<name>`` is ``layer.inner.<name>``, typed as the protocol method it is made of.

    A non-data descriptor: reading it returns the inner component's bound method itself (no
    wrapper, no extra frame when it is called), and, like a method, an instance attribute of
    the same name takes its place (``unittest.mock.patch.object(layer, "replace")`` works).

    Attributes:
        method: the protocol's method (``SequencedStorage.head``).
        name: its name, the only name this forwarder may be placed under.
    """

    def __init__(self, method: Callable[Concatenate[Any, P], R]) -> None:
        self.method = method
        self.name = method.__name__
        self.__doc__ = method.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self.name:
            raise TypeError(
                f"{owner.__qualname__}.{name} = forward({self.method.__qualname__}): a forwarder "
                f"must be placed under the method's own name, {self.name!r}"
            )

    def __repr__(self) -> str:
        return f"forward({self.method.__qualname__})"

    if TYPE_CHECKING:

        @overload
        def __get__(self, instance: None, owner: type | None = None, /) -> Self: ...

        @overload
        def __get__(self, instance: object, owner: type | None = None, /) -> Callable[P, R]: ...

        def __get__(self, instance: object, owner: type | None = None, /) -> Any: ...

    else:

        def __get__(self, instance, owner=None, /):
            if instance is None:
                return self
            return getattr(instance.inner, self.name)


def forward(method: Callable[Concatenate[Any, P], R]) -> Forward[P, R]:
    """A forwarder of ``method`` (a protocol's method, ``SequencedStorage.head``) to
    ``self.inner``; place it under the method's own name."""
    return Forward(method)


class Hidden(property):
    """What a layer puts where the methods of an ability it hides would be: reading it raises
    ``AttributeError``, so ``hasattr(layer, name)`` is false and no call can reach the
    component below around the layer.

    Attributes:
        ability: the hidden ability.
        name: the method's name.
    """

    def __init__(self, ability: type, name: str) -> None:
        def hidden(layer: object) -> NoReturn:
            raise AttributeError(
                f"{type(layer).__name__} hides {ability.__name__}: it has no {name}() (so "
                "nothing can reach the store below around it); find_ability() says which "
                "abilities a stack has",
                name=name,
                obj=layer,
            )

        super().__init__(hidden)
        self.ability = ability
        self.name = name
        self.__doc__ = f"Hidden: this layer does not offer {ability.__name__}."

    def __repr__(self) -> str:
        return f"<hidden {self.ability.__name__}.{self.name}>"


class AbilityForwarders:
    """One forwarder for every method of every ability (a test keeps it complete)."""

    describe = forward(DescribableStorage.describe)
    list_keys = forward(ListableStorage.list_keys)
    head = forward(SequencedStorage.head)
    fetch_since = forward(SequencedStorage.fetch_since)
    load_checkpoint = forward(CheckpointStorage.load_checkpoint)
    save_checkpoint = forward(CheckpointStorage.save_checkpoint)
    acquire_lease = forward(CheckpointStorage.acquire_lease)
    release_lease = forward(CheckpointStorage.release_lease)
    replace = forward(ReplaceableStorage.replace)
    save_messages_if = forward(ReplaceableStorage.save_messages_if)
    list_sessions = forward(SessionListing.list_sessions)
    search = forward(SearchableStorage.search)
    save_record = forward(RecordStorage.save_record)
    fetch_records = forward(RecordStorage.fetch_records)
    purge = forward(RetentionStorage.purge)
    fork = forward(TimeTravelStorage.fork)
    rewind = forward(TimeTravelStorage.rewind)
    fetch_as_of = forward(TimeTravelStorage.fetch_as_of)
    fetch_timeline = forward(TimeTravelStorage.fetch_timeline)
    provenance = forward(TimeTravelStorage.provenance)

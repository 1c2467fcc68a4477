"""What a layer does with each ability, declared once per layer and checked when the class is
made; :func:`find_ability` reads those declarations.

A layer says, for *every* ability of :data:`~storage.abilities.ABILITIES`::

    class AuditLayer(ChatStorageWrapper):
        abilities = Abilities(
            passes=(ListableStorage, SequencedStorage, SessionListing),
            transforms=(DescribableStorage, RecordStorage),
            hides=(CheckpointStorage, ReplaceableStorage, SearchableStorage, RetentionStorage),
        )

- ``passes``: forwarded unchanged (the forwarder of :mod:`.forwarding` is put in place, even
  over a base class's implementation);
- ``transforms``: the layer implements every method of the ability itself (or forwards one
  on purpose with ``name = forward(Ability.name)``);
- ``hides``: not offered: its methods raise ``AttributeError``, ``isinstance`` is false and
  :func:`find_ability` returns ``None`` for every stack holding the layer.

An ability a declaration leaves out or names twice, a transformed ability missing a method,
a passed or hidden ability whose method the class defines itself, or an ability offered while
one it extends is hidden is a ``TypeError`` when the class is made. A subclass without a
declaration keeps its parent's, except that an ability whose every method it defines itself
becomes ``transforms`` (defining only some of them is a ``TypeError``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final, Literal, TypeVar, cast

import attrs

from storage.abilities.forwarding import AbilityForwarders, Forward, Hidden
from storage.abilities.protocols import ABILITIES, ability_methods, offered_through

__all__ = ["Abilities", "find_ability", "settle"]

A = TypeVar("A")
Kind = Literal["passes", "transforms", "hides"]
KINDS: Final[tuple[Kind, ...]] = ("passes", "transforms", "hides")

_METHODS: Final = {ability: ability_methods(ability) for ability in ABILITIES}
_PARENTS: Final = {
    ability: tuple(a for a in ABILITIES if a is not ability and a in ability.__mro__)
    for ability in ABILITIES
}
_CARRIED: Final = {
    name: value for name, value in vars(AbilityForwarders).items() if isinstance(value, Forward)
}


def _types(abilities: Iterable[type]) -> tuple[type, ...]:
    return tuple(abilities)


def _names(abilities: tuple[type, ...]) -> str:
    return ", ".join(a.__name__ for a in abilities)


@attrs.frozen
class Abilities:
    """A layer's declaration: which abilities it passes, transforms and hides.

    Every ability of :data:`~storage.abilities.ABILITIES` must be named exactly once (checked
    when the layer's class is made).
    """

    passes: tuple[type, ...] = attrs.field(default=(), converter=_types)
    transforms: tuple[type, ...] = attrs.field(default=(), converter=_types)
    hides: tuple[type, ...] = attrs.field(default=(), converter=_types)

    def kind(self, ability: type) -> Kind | None:
        """What the layer does with ``ability`` (``None``: the declaration does not name it)."""
        for kind in KINDS:
            if ability in getattr(self, kind):
                return kind
        return None

    def offers(self, ability: type) -> bool | None:
        """Whether the layer offers ``ability`` (passes or transforms it); ``None`` for a
        protocol the declaration does not name (then only its methods tell), unless it
        extends an ability the layer hides (``False``)."""
        kind = self.kind(ability)
        if kind is not None:
            return kind != "hides"
        if any(a in ability.__mro__ and self.kind(a) == "hides" for a in ABILITIES):
            return False
        return None

    def _check(self, where: str) -> None:
        named = [a for kind in KINDS for a in getattr(self, kind)]
        unknown = tuple(a for a in named if a not in ABILITIES)
        if unknown:
            raise TypeError(f"{where} declares {_names(unknown)}, which are not abilities")
        twice = tuple(a for a in ABILITIES if named.count(a) > 1)
        if twice:
            raise TypeError(f"{where} declares {_names(twice)} more than once")
        missing = tuple(a for a in ABILITIES if a not in named)
        if missing:
            raise TypeError(
                f"{where} does not say what it does with {_names(missing)}: name each in its "
                "abilities declaration (passes, transforms or hides)"
            )
        for ability in ABILITIES:
            hidden = tuple(p for p in _PARENTS[ability] if self.kind(p) == "hides")
            if self.kind(ability) != "hides" and hidden:
                raise TypeError(
                    f"{where} offers {ability.__name__} but hides {_names(hidden)}, which it "
                    "extends"
                )


def _resolve(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def _kind(name: str, attr: Any) -> str:
    if attr is _CARRIED[name]:
        return "carried"
    if isinstance(attr, Hidden):
        return "hidden"
    return "forward" if isinstance(attr, Forward) else "own"


def _inherited(cls: type) -> Abilities:
    """The declaration of a class that has none: its parent's, with each ability whose every
    method the class defines itself (a mixin, a forwarder) made ``transforms``."""
    parent = next(k for k in cls.__mro__[1:] if "__chatlayers_abilities__" in k.__dict__)
    declared: Abilities = parent.__dict__["__chatlayers_abilities__"]
    kinds: dict[type, Kind] = {a: declared.kind(a) or "hides" for a in ABILITIES}
    for ability, names in _METHODS.items():
        changed = [n for n in names if _resolve(cls, n) is not _resolve(parent, n)]
        if not changed:
            continue
        if all(_kind(n, _resolve(cls, n)) in ("own", "forward") for n in names):
            kinds[ability] = "transforms"
        else:
            raise TypeError(
                f"{cls.__qualname__} defines {', '.join(changed)} of {ability.__name__} but not "
                "every method of it: declare what the layer does with each ability "
                "(abilities = Abilities(passes=..., transforms=..., hides=...))"
            )
    return Abilities(
        passes=tuple(a for a in ABILITIES if kinds[a] == "passes"),
        transforms=tuple(a for a in ABILITIES if kinds[a] == "transforms"),
        hides=tuple(a for a in ABILITIES if kinds[a] == "hides"),
    )


def settle(cls: type, *, install: bool = True) -> Abilities:
    """Check ``cls``'s declaration against what it defines, put its passed and hidden
    abilities' methods in place (unless ``install`` is false) and record the result as
    ``cls.__chatlayers_abilities__``.

    Raises:
        TypeError: the declaration is incomplete or contradicts the class (see the module).
    """
    where = cls.__qualname__
    own = cls.__dict__.get("abilities")
    if own is None:
        declared = _inherited(cls)
    elif not isinstance(own, Abilities):
        raise TypeError(f"{where}.abilities must be an Abilities(...) declaration")
    else:
        declared = own
    declared._check(where)
    for ability, names in _METHODS.items():
        kind = declared.kind(ability)
        for name in names:
            attr = _resolve(cls, name)
            found = _kind(name, attr)
            # A passed method may be forwarded here on purpose; a hidden one not even that.
            mine = name in cls.__dict__ and found in (
                ("own", "forward") if kind == "hides" else ("own",)
            )
            if kind == "transforms":
                if found in ("carried", "hidden"):
                    raise TypeError(
                        f"{where} transforms {ability.__name__} but does not define {name}() "
                        f"(write it, or forward it on purpose: {name} = "
                        f"forward({ability.__name__}.{name}))"
                    )
            elif mine:
                raise TypeError(
                    f"{where} {kind} {ability.__name__} but defines {name}() itself: declare "
                    f"{ability.__name__} in transforms"
                )
            elif kind == "passes" and found in ("own", "hidden") and install:
                setattr(cls, name, _CARRIED[name])
            elif kind == "hides" and found != "hidden" and install:
                setattr(cls, name, Hidden(ability, name))
    setattr(cls, "__chatlayers_abilities__", declared)  # noqa: B010
    return declared


def find_ability(stack: object, ability: Callable[..., A]) -> A | None:
    """``stack`` typed as ``ability`` when every component of its ``.inner`` chain has it.

    ``ability`` is a protocol class (``find_ability(stack, SessionListing)``); it is typed
    as a callable so that a user's ``mypy --strict`` accepts a protocol there (``type[A]``
    would be refused as abstract).

    A layer has an ability when its declaration passes or transforms it (``Abilities``); a
    store (any component without a declaration) when it has the ability's methods. A layer
    that hides an ability hides it from the whole stack: calling it on a lower component
    would bypass that layer (a scrubber, an encrypting layer).
    """
    if stack is None or not offered_through(stack, cast(type, ability)):
        return None
    found: A = stack  # type: ignore[assignment]
    return found

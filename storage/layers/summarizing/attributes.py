"""Attributes of the summarizing layer that belong to one of its parts.

``layer.trigger_at`` is its options' (read-only: the options are validated once, frozen),
``layer.summaries_made`` its views' counter; :class:`Delegated` makes each such attribute
from the name of the part that holds it, typed, so the layer repeats no property per option.
"""

from __future__ import annotations

from typing import Any, Generic, Self, TypeVar, overload

__all__ = ["Delegated"]

T = TypeVar("T")


class Delegated(Generic[T]):
    """An attribute read from (and, when ``settable``, written to) the attribute of the same
    name of the owner's part ``part`` (an attribute name of the owner).

    Args:
        part: where the value lives (``"_options"``).
        settable: assignments write through to the part (counters); else read-only.
    """

    def __init__(self, part: str, *, settable: bool = False) -> None:
        self._part = part
        self._settable = settable
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, instance: None, owner: type) -> Self: ...
    @overload
    def __get__(self, instance: object, owner: type) -> T: ...
    def __get__(self, instance: object | None, owner: type) -> Self | T:
        if instance is None:
            return self
        value: T = getattr(getattr(instance, self._part), self._name)
        return value

    def __set__(self, instance: object, value: T) -> None:
        if not self._settable:
            raise AttributeError(f"{self._name} is read-only (an option of the layer)")
        part: Any = getattr(instance, self._part)
        setattr(part, self._name, value)

"""Attributes of the summarizing layer that belong to one of its parts.

``layer.trigger_at`` is its options' (read-only: the options are validated once, frozen),
``layer.summaries_made`` its views' counter; :class:`Delegated` and :class:`Settable` make
each such attribute from the name of the part that holds it, typed, so the layer repeats no
property per option. :class:`LayerAttributes` declares them all (the layer's base class; the
layer documents them).
"""

from __future__ import annotations

from typing import Any, Generic, Never, NoReturn, Self, TypeVar, overload

from storage.layers.summarizing.options import Coherence, OnError, SummaryRole

__all__ = ["Delegated", "LayerAttributes", "Settable"]

T = TypeVar("T")


class Delegated(Generic[T]):
    """A read-only attribute: the attribute of the same name of the owner's part ``part``
    (an attribute name of the owner). Assigning to it is an error (for type checkers too).

    Args:
        part: where the value lives (``"_options"``).
    """

    def __init__(self, part: str) -> None:
        self._part = part
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

    def __set__(self, instance: object, value: Never) -> NoReturn:
        raise AttributeError(f"{self._name} is read-only (an option of the layer)")


class Settable(Delegated[T]):
    """Like :class:`Delegated`, and assignments write through to the part (counters a
    caller may reset)."""

    def __set__(self, instance: object, value: T) -> None:  # type: ignore[override]
        part: Any = getattr(instance, self._part)
        setattr(part, self._name, value)


class LayerAttributes:
    """The summarizing layer's attributes that are its options' (``_options``, read-only),
    its counters (``_counts``, settable) and ``serve_only`` (its policy's, settable); see
    ``SummarizingChatStorage``."""

    trigger_at = Delegated[int | None]("_options")
    keep_last = Delegated[int]("_options")
    trigger_tokens = Delegated[int | None]("_options")
    keep_tokens = Delegated[int | None]("_options")
    model = Delegated[str]("_options")
    trim_tool_results = Delegated[int | None]("_options")
    trim_keep_turns = Delegated[int]("_options")
    clear_tool_results = Delegated[bool]("_options")
    background = Delegated[bool]("_options")
    max_buffers = Delegated[int]("_options")
    timeout = Delegated[float | None]("_options")
    lease_ttl = Delegated[float]("_options")
    summary_role = Delegated[SummaryRole]("_options")
    coherence = Delegated[Coherence]("_options")
    on_error = Delegated[OnError]("_options")

    summaries_made = Settable[int]("_counts")
    summary_failures = Settable[int]("_counts")
    lease_busy = Settable[int]("_counts")
    checkpoint_conflicts = Settable[int]("_counts")
    checkpoints_loaded = Settable[int]("_counts")
    summarizer_calls = Settable[int]("_counts")
    clears_made = Settable[int]("_counts")
    collapses_made = Settable[int]("_counts")
    trims_made = Settable[int]("_counts")
    saves_triggering = Settable[int]("_counts")

    serve_only = Settable[bool]("_policy")

"""The telemetry hook: what layers report, to whoever listens (nobody by default).

Layers report what happens inside them (a summarizer call, a compaction, PII found, a data
key destroyed) through this module, wherever it happens; the ``otel`` layer
(:class:`storage.layers.otel.TelemetryChatStorage`) listens and turns it into OpenTelemetry
spans and metrics. Without a listener every call here is one context-variable read and
returns at once: nothing is recorded, nothing of OpenTelemetry is imported.

The listener is a :class:`Recorder` set for the current context (:func:`recording`): the
``otel`` layer sets its own for the duration of each call, so the layers below it report to
it, and so do tasks started meanwhile (a background summary inherits the context of the
save that scheduled it). What a layer may report, and the attributes it gives (counts,
sizes, durations, outcomes; never a message's text, a PII value or a raw id):

- spans (:func:`span`): ``scrub`` (``messages``; PII by entity as events), ``encrypt`` and
  ``decrypt`` (``messages``), ``summarize`` (a summarizer call: ``messages``, ``outcome``),
  ``compaction`` (``trigger``, ``kind``, messages and tokens before and after), and the
  ``migration`` and ``command`` spans of :func:`operation`;
- events (:func:`emit`): ``pii`` (``{entity: count}``), ``data_key_destroyed``, and others
  a layer documents; the recorder adds them to the innermost open span.

A program that moves or maintains data (``chatlayers migrate``, a CLI command) wraps its work
in :func:`operation` (or :func:`migration`) so it is one span, with the stack's own
operations inside, whenever the stack has an ``otel`` layer.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from types import TracebackType
from typing import Protocol, TypeAlias

from storage.message import ChatKey, ChatMessage

__all__ = [
    "NULL_SPAN",
    "AttributeValue",
    "Recorder",
    "SpanHandle",
    "emit",
    "find_recorder",
    "migration",
    "operation",
    "recorder",
    "recording",
    "span",
]

AttributeValue: TypeAlias = str | bool | int | float
"""What an attribute may hold: a name, a flag, a count, a size or a duration."""


class SpanHandle(Protocol):
    """An open span: attributes may be set and counts added until it ends."""

    def set(self, name: str, value: AttributeValue) -> None:
        """Set attribute ``name`` (without the ``chatlayers.`` prefix)."""
        ...

    def add(self, name: str, count: int) -> None:
        """Add ``count`` to the counted attribute ``name`` (starts at 0)."""
        ...

    def __enter__(self) -> SpanHandle: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class Recorder(Protocol):
    """What listens to the hook (the ``otel`` layer's recorder)."""

    def span(
        self, name: str, key: ChatKey | None, attributes: Mapping[str, AttributeValue]
    ) -> SpanHandle:
        """A span named ``name`` about ``key`` (``None``: no conversation), not yet open."""
        ...

    def event(
        self, name: str, key: ChatKey | None, attributes: Mapping[str, AttributeValue]
    ) -> None:
        """Something happened: count it, and note it on the innermost open span."""
        ...

    def tokens(self, messages: Sequence[ChatMessage]) -> int | None:
        """Tokens of ``messages`` for the recorder's model (``None``: not counted)."""
        ...


class _NullSpan:
    """The span of nobody listening: every method does nothing."""

    __slots__ = ()

    def set(self, name: str, value: AttributeValue) -> None:
        return None

    def add(self, name: str, count: int) -> None:
        return None

    def __enter__(self) -> _NullSpan:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


NULL_SPAN: SpanHandle = _NullSpan()
"""What :func:`span` returns when nobody listens."""

_current: ContextVar[Recorder | None] = ContextVar("chatlayers.telemetry", default=None)

recorder = _current.get
"""``recorder()``: the :class:`Recorder` of the current context, or ``None`` (check it before
computing what only a recorder needs, such as PII counts)."""


def span(name: str, key: ChatKey | None = None, **attributes: AttributeValue) -> SpanHandle:
    """A span for ``with``: the current recorder's, or :data:`NULL_SPAN` when none listens."""
    current = _current.get()
    if current is None:
        return NULL_SPAN
    return current.span(name, key, attributes)


def emit(name: str, key: ChatKey | None = None, **attributes: AttributeValue) -> None:
    """Report event ``name`` to the current recorder (nothing when none listens)."""
    current = _current.get()
    if current is not None:
        current.event(name, key, attributes)


@contextmanager
def recording(listener: Recorder | None) -> Iterator[None]:
    """Make ``listener`` the current recorder for the block (``None``: nobody listens)."""
    token = _current.set(listener)
    try:
        yield
    finally:
        _current.reset(token)


def find_recorder(stack: object) -> Recorder | None:
    """The recorder of the outermost ``otel`` layer of ``stack`` (a stack or a chain of
    layers), or ``None``."""
    from storage.config.stack import components

    for component in components(stack):
        found = getattr(component, "telemetry_recorder", None)
        if found is not None:
            listener: Recorder = found
            return listener
    return None


@contextmanager
def operation(stack: object, name: str, **attributes: AttributeValue) -> Iterator[SpanHandle]:
    """One span ``name`` around a block of work on ``stack`` (the stack's own calls inside
    it become its children), when ``stack`` has an ``otel`` layer; else a no-op.

    Yields:
        The open span: ``span.add("messages", n)``, ``span.set("outcome", "done")``.
    """
    listener = find_recorder(stack)
    if listener is None:
        yield NULL_SPAN
        return
    with recording(listener), listener.span(name, None, attributes) as handle:
        yield handle


def migration(source: object, target: object) -> AbstractContextManager[SpanHandle]:
    """The ``migration`` span of copying ``source`` into ``target``: on the ``otel`` layer
    of ``target``, else of ``source`` (a no-op when neither has one).

    A migration reports what it copied with ``add``: ``conversations``, ``messages``,
    ``checkpoints``, ``records`` (each also a counter ``chatlayers.migrated.<name>``),
    and ``skipped`` for what was there already::

        with migration(source, target) as span:
            for key in keys:
                copied = await copy(key)
                span.add("conversations", 1)
                span.add("messages", copied)
    """
    return operation(target if find_recorder(target) is not None else source, "migration")

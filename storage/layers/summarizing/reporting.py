"""The ``compaction`` span a summarizing layer reports to the telemetry hook
(:mod:`storage.telemetry`), only when a recorder listens.

Attributes: ``trigger`` (``inline``: the save or fetch that found the view due,
``background``: a task the save scheduled, ``manual``: ``compact()``), ``mode`` (``store`` or
``memory`` summaries), ``kind`` (``summary``, ``trim``: trimming alone, ``given``: a summary
passed to ``compact()``), ``outcome`` (``installed``, ``unchanged``: nothing could be cut or
another worker did it, ``lease_busy``, ``conflict``: another writer's checkpoint won,
``error``: the summarizer failed, also when ``on_error="fallback"`` absorbs it), and the
view's messages and tokens before and after (``messages.before``, ``tokens.after``, ...).
The summarizer call inside is a ``summarize`` child span (:mod:`.calling`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType

from storage.layers.summarizing.state import KeyState
from storage.message import ChatKey, ChatMessage
from storage.telemetry import AttributeValue, Recorder, SpanHandle

__all__ = ["CompactionReport", "compaction_span"]


class CompactionReport:
    """The open ``compaction`` span: ``set``/``add`` as any span, and :meth:`installed`."""

    def __init__(self, listener: Recorder, handle: SpanHandle) -> None:
        self._listener = listener
        self._handle = handle
        self.kind: str | None = None

    def set(self, name: str, value: AttributeValue) -> None:
        if name == "kind":
            self.kind = str(value)
        self._handle.set(name, value)

    def add(self, name: str, count: int) -> None:
        self._handle.add(name, count)

    def installed(self, view: Sequence[ChatMessage] | None) -> None:
        """A new view was installed (``view``; ``None``: nothing was)."""
        if view is None:
            return
        self._handle.set("outcome", "installed")
        self._handle.set("messages.after", len(view))
        tokens = self._listener.tokens(view)
        if tokens is not None:
            self._handle.set("tokens.after", tokens)

    def __enter__(self) -> CompactionReport:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


@contextmanager
def compaction_span(
    listener: Recorder, key: ChatKey, state: KeyState, trigger: str, mode: str
) -> Iterator[CompactionReport]:
    """A ``compaction`` span about ``key`` around one compaction attempt of ``state``'s
    view."""
    with listener.span("compaction", key, {"trigger": trigger, "mode": mode}) as handle:
        report = CompactionReport(listener, handle)
        view = state.view
        if view is not None:
            handle.set("messages.before", len(view))
            tokens = listener.tokens(view)
            if tokens is not None:
                handle.set("tokens.before", tokens)
        try:
            yield report
        finally:
            if report.kind is None:
                handle.set("kind", "summary")

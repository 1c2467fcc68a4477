"""The OpenTelemetry recorder: the telemetry hook's spans and events as OTel spans and metrics.

Imported only when an ``otel`` layer is built (it imports ``opentelemetry``; the ``otel``
extra installs it). Spans are named ``chatlayers.<operation>`` and carry
``chatlayers.<attribute>`` attributes: counts and sizes, the outcome, the hashed ids
(``chatlayers.user.hash``, ``chatlayers.session.hash``, ``chatlayers.agent.hash``,
:mod:`storage.telemetry.ids`) and the base store's kind (``chatlayers.store``). A failed
operation's span has status ERROR and ``error.type`` (the exception's class), never its
message (messages can quote input). Metrics (low-cardinality attributes only: operation,
outcome, store, entity, never an id):

- ``chatlayers.operation.duration`` (histogram, s): every span, by ``chatlayers.operation``
  and ``chatlayers.outcome``;
- ``chatlayers.summarizer.duration`` (histogram, s) and ``chatlayers.summarizer.calls``
  (counter): summarizer calls by outcome;
- ``chatlayers.compactions`` (counter): by ``chatlayers.kind`` and ``chatlayers.trigger``;
- ``chatlayers.view.tokens`` (histogram, tokens): the views fetched;
- ``chatlayers.pii.found`` (counter): PII replaced, by ``chatlayers.pii.entity``;
- ``chatlayers.messages.saved``, ``chatlayers.messages.purged``, ``chatlayers.erasures``,
  ``chatlayers.migrated.{conversations,messages,checkpoints,records}`` (counters).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Status, StatusCode

from storage.message import ChatKey, ChatMessage
from storage.telemetry import AttributeValue
from storage.telemetry.ids import KeyHasher

__all__ = ["OtelRecorder", "RecordedSpan"]

PREFIX: Final = "chatlayers."
SCOPE: Final = "chatlayers"

# Counted attributes of a span that are also counters: (operation, count) -> counter name.
_COUNTERS: Final = {
    ("save", "messages.stored"): "chatlayers.messages.saved",
    ("replace", "messages.stored"): "chatlayers.messages.saved",
    ("purge", "messages.purged"): "chatlayers.messages.purged",
    ("migration", "conversations"): "chatlayers.migrated.conversations",
    ("migration", "messages"): "chatlayers.migrated.messages",
    ("migration", "checkpoints"): "chatlayers.migrated.checkpoints",
    ("migration", "records"): "chatlayers.migrated.records",
}

# Store calls take microseconds to milliseconds, summarizer calls up to seconds.
_SECONDS: Final = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
_TOKENS: Final = (100, 250, 500, 1000, 2000, 4000, 8000, 16000, 32000, 64000, 128000, 256000)

_open: ContextVar[RecordedSpan | None] = ContextVar("chatlayers.telemetry.span", default=None)


class RecordedSpan:
    """One ``chatlayers.<name>`` span, open between ``__enter__`` and ``__exit__``.

    Attributes set before it opens go into the OTel span's start attributes (samplers see
    them); counts are written when it ends.
    """

    __slots__ = (
        "_attributes",
        "_context_token",
        "_counts",
        "_key",
        "_name",
        "_open_token",
        "_recorder",
        "_span",
        "_started",
        "parent",
    )

    def __init__(
        self,
        recorder: OtelRecorder,
        name: str,
        key: ChatKey | None,
        attributes: Mapping[str, AttributeValue],
    ) -> None:
        self._recorder = recorder
        self._name = name
        self._key = key
        self._attributes: dict[str, AttributeValue] = dict(attributes)
        self._counts: dict[str, int] = {}
        self._span: Any = None
        self.parent: RecordedSpan | None = None

    @property
    def name(self) -> str:
        return self._name

    def set(self, name: str, value: AttributeValue) -> None:
        self._attributes[name] = value
        if self._span is not None:
            self._span.set_attribute(PREFIX + name, value)

    def add(self, name: str, count: int) -> None:
        self._counts[name] = self._counts.get(name, 0) + count

    def __enter__(self) -> RecordedSpan:
        recorder = self._recorder
        start = {PREFIX + k: v for k, v in self._attributes.items()}
        start["chatlayers.store"] = recorder.store
        if self._key is not None:
            user, session, agent = recorder.hasher.key(self._key)
            start["chatlayers.user.hash"] = user
            start["chatlayers.session.hash"] = session
            start["chatlayers.agent.hash"] = agent
        self._span = recorder.tracer.start_span(PREFIX + self._name, attributes=start)
        self._context_token = otel_context.attach(trace.set_span_in_context(self._span))
        self.parent = _open.get()
        self._open_token: Token[RecordedSpan | None] = _open.set(self)
        self._started = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        seconds = time.perf_counter() - self._started
        _open.reset(self._open_token)
        otel_context.detach(self._context_token)
        span = self._span
        for name, count in self._counts.items():
            span.set_attribute(PREFIX + name, count)
        outcome = self._attributes.get("outcome")
        if exc is not None:
            if outcome is None or outcome == "ok":
                outcome = "error"
            span.set_attribute("error.type", f"{exc_type.__module__}.{exc_type.__qualname__}")  # type: ignore[union-attr]
            span.set_status(Status(StatusCode.ERROR, exc_type.__name__ if exc_type else None))
        elif outcome is None:
            outcome = "ok"
        span.set_attribute("chatlayers.outcome", str(outcome))
        span.end()
        self._recorder.finished(self, seconds, str(outcome), self._attributes, self._counts)


class OtelRecorder:
    """The hook's recorder over an OTel tracer and meter.

    Args:
        hasher: hashes the ids of keys.
        store: the base store's kind, an attribute of every span and metric.
        tracer_provider: where spans go; ``None``: the global provider (the application's
            SDK setup, a no-op until it has one).
        meter_provider: where metrics go; ``None``: the global provider.
        tokens: counts the tokens of messages (``None``: tokens are not counted).
    """

    def __init__(
        self,
        hasher: KeyHasher,
        store: str,
        *,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        tokens: Callable[[Sequence[ChatMessage]], int | None] | None = None,
    ) -> None:
        self.hasher = hasher
        self._count_tokens = tokens
        self.store = store
        self.tracer = (
            trace.get_tracer(SCOPE)
            if tracer_provider is None
            else tracer_provider.get_tracer(SCOPE)
        )
        meter = (
            metrics.get_meter(SCOPE) if meter_provider is None else meter_provider.get_meter(SCOPE)
        )
        self._duration = meter.create_histogram(
            "chatlayers.operation.duration",
            unit="s",
            description="Duration of an operation",
            explicit_bucket_boundaries_advisory=_SECONDS,
        )
        self._summarizer_duration = meter.create_histogram(
            "chatlayers.summarizer.duration",
            unit="s",
            description="Duration of a summarizer call",
            explicit_bucket_boundaries_advisory=_SECONDS,
        )
        self._summarizer_calls = meter.create_counter(
            "chatlayers.summarizer.calls", unit="{call}", description="Summarizer calls"
        )
        self._compactions = meter.create_counter(
            "chatlayers.compactions", unit="{compaction}", description="Compactions of a view"
        )
        self._view_tokens = meter.create_histogram(
            "chatlayers.view.tokens",
            unit="{token}",
            description="Tokens of the views fetched",
            explicit_bucket_boundaries_advisory=_TOKENS,
        )
        self._pii = meter.create_counter(
            "chatlayers.pii.found", unit="{value}", description="PII values replaced, by entity"
        )
        self._erasures = meter.create_counter(
            "chatlayers.erasures", unit="{erasure}", description="Conversations and users erased"
        )
        self._counters = {
            name: meter.create_counter(name, unit="{item}")
            for name in sorted(set(_COUNTERS.values()))
        }
        self._events = meter.create_counter(
            "chatlayers.events", unit="{event}", description="Other reported events, by name"
        )

    # --- the Recorder protocol ---------------------------------------------------------

    def span(
        self, name: str, key: ChatKey | None, attributes: Mapping[str, AttributeValue]
    ) -> RecordedSpan:
        return RecordedSpan(self, name, key, attributes)

    def event(
        self, name: str, key: ChatKey | None, attributes: Mapping[str, AttributeValue]
    ) -> None:
        if name == "pii":
            found = 0
            for entity, count in attributes.items():
                if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
                    continue
                found += count
                self._pii.add(count, {"chatlayers.pii.entity": entity, **self._base()})
                self._add_open(f"pii.{entity}", count)
            if found:
                self._add_open("pii", found)
            return
        self._events.add(1, {"chatlayers.event": name, **self._base()})
        self._add_open(f"events.{name}", 1)
        current = trace.get_current_span()
        current.add_event(PREFIX + name, {PREFIX + k: v for k, v in attributes.items()})

    def tokens(self, messages: Sequence[ChatMessage]) -> int | None:
        return None if self._count_tokens is None else self._count_tokens(messages)

    # --- metrics when a span ends --------------------------------------------------------

    def _base(self) -> dict[str, AttributeValue]:
        return {"chatlayers.store": self.store}

    @staticmethod
    def _add_open(name: str, count: int) -> None:
        """Add to the innermost open span and every span it is inside of."""
        current = _open.get()
        while current is not None:
            current.add(name, count)
            current = current.parent

    def finished(
        self,
        span: RecordedSpan,
        seconds: float,
        outcome: str,
        attributes: Mapping[str, AttributeValue],
        counts: Mapping[str, int],
    ) -> None:
        """Record the metrics of a span that ended."""
        name = span.name
        base = self._base()
        self._duration.record(
            seconds, {"chatlayers.operation": name, "chatlayers.outcome": outcome, **base}
        )
        if name == "summarize":
            labels = {"chatlayers.outcome": outcome, **base}
            self._summarizer_calls.add(1, labels)
            self._summarizer_duration.record(seconds, labels)
        elif name == "compaction":
            self._compactions.add(
                1,
                {
                    "chatlayers.kind": str(attributes.get("kind", "summary")),
                    "chatlayers.trigger": str(attributes.get("trigger", "unknown")),
                    "chatlayers.outcome": outcome,
                    **base,
                },
            )
        elif name == "erasure" and outcome == "ok":
            self._erasures.add(1, {"chatlayers.scope": str(attributes.get("scope", "")), **base})
        elif name == "fetch":
            tokens = attributes.get("tokens.view")
            if isinstance(tokens, int) and not isinstance(tokens, bool):
                self._view_tokens.record(tokens, base)
        for count_name, count in counts.items():
            counter = _COUNTERS.get((name, count_name))
            if counter is not None and count:
                self._counters[counter].add(count, base)

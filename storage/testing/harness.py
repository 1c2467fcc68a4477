"""What a store author gives the conformance kit: a :class:`StoreHarness`, and the stacks
(:data:`LAYERINGS`) the kit builds over it."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs

from storage.message import ChatKey
from storage.protocol import ChatStorage

__all__ = [
    "CHECKPOINT_DAMAGE",
    "DEFAULT_LAYERINGS",
    "INDEX_DAMAGE",
    "LAYERINGS",
    "NEWER_FORMAT",
    "TALLY_DAMAGE",
    "Damage",
    "FakeClock",
    "Layering",
    "ServerControl",
    "StoreHarness",
    "observed",
    "open_store",
    "scrubbed",
    "summarized",
]

StoreOpener = Callable[..., "ChatStorage | Awaitable[ChatStorage]"]
Layering = Callable[[ChatStorage], ChatStorage]
Damage = Callable[[str, ChatKey], "bool | Awaitable[bool]"]
Snapshot = Callable[[], "object | Awaitable[object]"]

CHECKPOINT_DAMAGE: tuple[str, ...] = (
    "checkpoint-json",  # the key's stored checkpoint is not valid JSON (or the store's format)
    "checkpoint-shape",  # valid JSON, the wrong shape or field types
    "checkpoint-message",  # a summary message in it does not decode
    "checkpoint-version",  # it says another format version
)
TALLY_DAMAGE: tuple[str, ...] = (
    "head-missing",  # the key's head / per-key tally is gone (its messages stay)
    "head-garbled",  # it holds values the store never writes (or numbers that lie)
    "session-missing",  # the key's session's listing tally is gone
    "session-garbled",  # it holds values the store never writes (or numbers that lie)
)
INDEX_DAMAGE: tuple[str, ...] = ("search-index",)  # the search index is damaged
NEWER_FORMAT = "newer-format"  # the stored data says a newer format or schema version


class FakeClock:
    """A clock a test moves by hand: seconds since the Unix epoch, like ``time.time``.

    Pass it as a store's ``clock`` option (the project's one clock convention: a
    ``Callable[[], float]`` of epoch seconds, for lease expiry, retention and intervals).
    """

    def __init__(self, start: float = 1_714_521_600.0) -> None:  # 2024-05-01T00:00:00Z
        self.now = float(start)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        self.now += seconds


@attrs.define
class ServerControl:
    """A server the kit may kill and restart (the store's own, for this test only).

    Attributes:
        open: a fresh store on that server (sync or async), as :attr:`StoreHarness.open`.
        kill: kill the server at once (SIGKILL); returns when it is down.
        restart: start it again on the same address and data; returns when it is up.
        password: the password in the store's URL (checked to be redacted in errors), or
            ``None`` when the URL has none.
    """

    open: StoreOpener
    kill: Callable[[], None]
    restart: Callable[[], None]
    password: str | None = None


@attrs.define
class StoreHarness:
    """How the kit opens the store under test.

    Attributes:
        open: ``open(**options)`` returns a new store instance (or an awaitable of one) over
            the test's database: every call in one test sees the same data (two instances
            over one database, a reopen after a crash). ``options`` are constructor options
            the kit asks for (``retention=60``, ``clock=FakeClock()``); raise ``TypeError``
            for one the store does not take and the kit skips what needs it.
        url: a URL another process can open with ``storage.open_storage`` (the same
            database), or ``None``: the kit then skips the multi-process scenarios (kill -9
            in the middle of a write, two processes on one key). A store registered
            through an entry point is found in the child process too (it gets this
            process's ``sys.path``).
        persistent: whether a new instance sees what an earlier (closed or killed) one
            stored; ``False`` for process memory.
        clock_option: the constructor option taking a clock (:class:`FakeClock`), or
            ``None`` when the store has none (lease-expiry and automatic-purge tests are
            skipped).
        damage: ``damage(what, key)`` breaks a derived record of ``key`` behind the store's
            back (sync or async; the data is the test's own), the way an operator, a crash
            or a bug would: ``what`` is one of :data:`CHECKPOINT_DAMAGE`,
            :data:`TALLY_DAMAGE`, :data:`INDEX_DAMAGE` or :data:`NEWER_FORMAT`. Return
            ``False`` when the store keeps no such record (the kit skips that scenario);
            ``None`` (default): every fault scenario is skipped.
        snapshot: every byte the store holds for the test (sync or async; any comparable
            value): compared before and after a store refused data of a newer format, which
            must stay untouched. ``None``: that comparison is skipped.
    """

    open: StoreOpener
    url: str | None = None
    persistent: bool = True
    clock_option: str | None = "clock"
    damage: Damage | None = None
    snapshot: Snapshot | None = None


async def open_store(opener: StoreOpener, **options: Any) -> ChatStorage:
    """Call ``opener(**options)`` and await the result when it is awaitable."""
    made = opener(**options)
    if inspect.isawaitable(made):
        made = await made
    return made


async def call_hook(hook: Callable[..., Any], *args: Any) -> Any:
    """Call a harness hook, awaiting its result when it is awaitable."""
    result = hook(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


def scrubbed(inner: ChatStorage) -> ChatStorage:
    """``scrub::``: the PII scrubber as a transforming layer, with a fixed secret."""
    from storage.layers.transforming import TransformingChatStorage
    from storage.pii import PIIScrubber

    return TransformingChatStorage(inner, PIIScrubber(secret="conformance"))


def summarized(inner: ChatStorage) -> ChatStorage:
    """``summarize::`` with a threshold above every history of the protocol tests, so they
    hold for the delegating path; the kit's ``test_active_summarizing_*`` tests use a low
    trigger on every store."""
    from storage.layers.summarizing import SummarizingChatStorage

    return SummarizingChatStorage(inner, trigger_at=500)


def observed(inner: ChatStorage) -> ChatStorage:
    """``otel::`` recording into the OpenTelemetry SDK's in-memory span exporter and metric
    reader, so every span and metric is made for real (needs the ``otel`` extra)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from storage.layers.otel import TelemetryChatStorage

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return TelemetryChatStorage(
        inner, secret="conformance", tracer_provider=tracer_provider, meter_provider=meter_provider
    )


LAYERINGS: Mapping[str, Callable[[ChatStorage], ChatStorage]] = {
    "plain": lambda store: store,
    "scrub": scrubbed,
    "summarize::scrub": lambda store: summarized(scrubbed(store)),
    "otel::summarize::scrub": lambda store: observed(summarized(scrubbed(store))),
}
"""The stacks the protocol and ability tests run on, by name: each wraps the base store."""

DEFAULT_LAYERINGS: tuple[str, ...] = ("plain", "scrub", "summarize::scrub")
"""The layerings a ``ConformanceSuite`` runs on unless it names others (``otel::...`` needs
the ``otel`` extra)."""

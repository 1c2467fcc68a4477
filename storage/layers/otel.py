"""The ``otel`` layer: OpenTelemetry spans and metrics of a stack, ids hashed, never text.

``otel::summarize::scrub::sqlite:///chats.db`` (outermost: it sees what callers see). Every
call through it is a span (``chatlayers.save``, ``.fetch``, ``.fetch_all_chats``,
``.replace``, ``.purge``, ``.erasure``) with counts and sizes as attributes; while it runs,
the layer is the recorder of the telemetry hook (:mod:`storage.telemetry`), so what the
layers below report (scrubbing with the PII found by entity, encryption, summarizer calls,
compactions, a destroyed data key) becomes child spans, events and metrics, also from a
background summary the call scheduled. What the spans and metrics are:
:mod:`storage.telemetry.otel`.

Needs the ``otel`` extra (``pip install 'chatlayers[otel]'``: opentelemetry-api, and the
SDK for ``exporter="console"``). Without this layer nothing of OpenTelemetry is imported.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Literal

from storage.abilities import (
    Abilities,
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
from storage.errors import ConfigError
from storage.message import AgentMessage, ChatKey, ChatMessage
from storage.protocol import ChatStorage, ChatStorageWrapper
from storage.telemetry import AttributeValue, SpanHandle, recording

__all__ = ["TelemetryChatStorage"]

log = logging.getLogger(__name__)

Exporter = Literal["console"]
_HINT = "pip install 'chatlayers[otel]'"


class TelemetryChatStorage(ChatStorageWrapper):
    """Report every call, and what the layers below do, as OpenTelemetry spans and metrics.

    Args:
        inner: the wrapped stack (put this layer outermost).
        secret: the key of the id hashes (prefer ``secret_env`` in config). ``None``:
            ``CHATLAYERS_TELEMETRY_SECRET``, else a random per-process secret (a warning
            says so; hashes then differ between processes).
        secret_source: where ``secret`` came from, shown by ``describe()``; set by the
            configuration (never given by hand).
        tokens: count the tokens of what is saved and fetched (``summarizers.count_tokens``
            for ``model``, remembered per message id); skipped with a warning when the
            tokenizer's files are not installed.
        model: the model whose tokenizer counts tokens (default ``"gpt-4o"``).
        exporter: ``None`` (default): the application's global tracer and meter providers
            (configured with the OpenTelemetry SDK, or by ``opentelemetry-instrument``);
            ``"console"``: providers of this layer's own, printing spans and metrics to
            stderr (trying it out from the CLI), shut down by ``aclose``.
        tracer_provider: in code: the provider spans go to (overrides ``exporter``).
        meter_provider: in code: the provider metrics go to (overrides ``exporter``).

    Attributes:
        telemetry_recorder: the hook's recorder (:func:`storage.telemetry.find_recorder`).

    Raises:
        ConfigError: opentelemetry is not installed (the ``otel`` extra), an empty secret.
    """

    abilities = Abilities(
        passes=(
            ListableStorage,
            SequencedStorage,
            CheckpointStorage,
            SessionListing,
            SearchableStorage,
            RecordStorage,
            TimeTravelStorage,
        ),
        transforms=(DescribableStorage, ReplaceableStorage, RetentionStorage),
    )

    def __init__(
        self,
        inner: ChatStorage,
        *,
        secret: str | None = None,
        secret_source: str | None = None,
        tokens: bool = True,
        model: str = "gpt-4o",
        exporter: Exporter | None = None,
        tracer_provider: Any = None,
        meter_provider: Any = None,
    ) -> None:
        super().__init__(inner)
        try:
            from storage.telemetry.otel import OtelRecorder
        except ImportError as exc:
            raise ConfigError(f"the otel layer needs opentelemetry-api: {_HINT}") from exc
        from storage.config.stack import components
        from storage.telemetry.ids import KeyHasher

        self._owned: list[Any] = []
        if exporter is not None and (tracer_provider is None or meter_provider is None):
            own_tracer, own_meter = _console_providers()
            self._owned = [own_tracer, own_meter]
            tracer_provider = tracer_provider or own_tracer
            meter_provider = meter_provider or own_meter
        self.exporter = exporter
        self._destination = (
            "given" if tracer_provider is not None and not self._owned else exporter or "global"
        )
        self.model = model
        self._counter: Any = None
        if tokens:
            from storage.tokens import TokenCounter

            try:
                self._counter = TokenCounter(model)
            except ConfigError as exc:
                log.warning("otel: token counts unavailable: %s", exc)
        base = components(inner)[-1]
        self.telemetry_recorder = OtelRecorder(
            KeyHasher(secret, source=secret_source),
            _store_kind(base),
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            tokens=self._tokens,
        )

    @contextmanager
    def _span(
        self, name: str, key: ChatKey | None, **attributes: AttributeValue
    ) -> Iterator[SpanHandle]:
        recorder = self.telemetry_recorder
        with recording(recorder), recorder.span(name, key, attributes) as handle:
            yield handle

    def _tokens(self, messages: Sequence[ChatMessage]) -> int | None:
        counter = self._counter
        if counter is None:
            return None
        total = 0
        for message in messages:
            # A summary or a trimmed copy keeps the id of what it stands for: key it apart.
            changed = message.metadata.get("chatlayers") if message.metadata else None
            total += counter.count(
                message, f"{message.id}\x00{hash(message.text)}" if changed else None
            )
        return total

    def _saved(self, handle: SpanHandle, stored: Sequence[ChatMessage]) -> None:
        handle.add("messages.stored", len(stored))
        tokens = self._tokens(stored)
        if tokens is not None:
            handle.set("tokens.raw", tokens)

    # --- ChatStorage ---------------------------------------------------------------------

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        with self._span("save", key, operation="save", messages=1) as handle:
            stored = await self.inner.save(key, message)
            self._saved(handle, stored)
            return stored

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        with self._span("save", key, operation="save_messages", messages=len(messages)) as handle:
            stored = await self.inner.save_messages(key, messages)
            self._saved(handle, stored)
            return stored

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        with self._span("fetch", key, limit=-1 if limit is None else limit) as handle:
            view = await self.inner.fetch(key, limit=limit)
            handle.set("messages", len(view))
            handle.set("summarized", bool(view) and any(m.is_summary for m in view[:2]))
            tokens = self._tokens(view)
            if tokens is not None:
                handle.set("tokens.view", tokens)
            return view

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[AgentMessage]:
        with self._span("fetch_all_chats", None) as handle:
            handle.set("user.hash", self.telemetry_recorder.hasher.user(user_id))
            rows = await self.inner.fetch_all_chats(user_id, session_id)
            handle.set("messages", len(rows))
            return rows

    async def delete(self, key: ChatKey) -> None:
        with self._span("erasure", key, scope="conversation"):
            await self.inner.delete(key)

    async def delete_user(self, user_id: str) -> None:
        with self._span("erasure", None, scope="user") as handle:
            handle.set("user.hash", self.telemetry_recorder.hasher.user(user_id))
            await self.inner.delete_user(user_id)

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            for provider in self._owned:
                provider.shutdown()
            self._owned = []

    # --- ReplaceableStorage and RetentionStorage --------------------------------------------

    async def replace(
        self,
        key: ChatKey,
        messages: Sequence[ChatMessage],
        *,
        expected_version: str | None = None,
    ) -> list[ChatMessage]:
        below: Any = self.inner
        with self._span("replace", key, messages=len(messages)) as handle:
            if expected_version is None:
                stored: list[ChatMessage] = await below.replace(key, messages)
            else:
                stored = await below.replace(key, messages, expected_version=expected_version)
            self._saved(handle, stored)
            return stored

    async def save_messages_if(
        self, key: ChatKey, messages: Sequence[ChatMessage], *, expected_version: str
    ) -> list[ChatMessage]:
        below: Any = self.inner
        with self._span(
            "save", key, operation="save_messages_if", messages=len(messages)
        ) as handle:
            stored: list[ChatMessage] = await below.save_messages_if(
                key, messages, expected_version=expected_version
            )
            self._saved(handle, stored)
            return stored

    async def purge(self, *, now: datetime | None = None) -> int:
        below: Any = self.inner
        with self._span("purge", None) as handle:
            deleted: int = await below.purge(now=now)
            handle.add("messages.purged", deleted)
            return deleted

    def describe(self) -> str:
        tokens = self.model if self._counter is not None else "off"
        where = self._destination
        secret = self.telemetry_recorder.hasher.source
        return f"TelemetryChatStorage(exporter={where}, tokens={tokens}, secret={secret})"


def _store_kind(store: object) -> str:
    """``sqlite`` for ``SQLiteChatStorage``: the base store's kind, for metrics."""
    name = type(store).__name__
    for suffix in ("ChatStorage", "Storage"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
            break
    name = name.lower()
    return "memory" if name == "inmemory" else name


def _console_providers() -> tuple[Any, Any]:
    """A tracer and a meter provider of the SDK printing to stderr.

    Raises:
        ConfigError: the SDK is not installed.
    """
    import sys

    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import (
            ConsoleMetricExporter,
            PeriodicExportingMetricReader,
        )
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError as exc:
        raise ConfigError(f"otel: exporter='console' needs opentelemetry-sdk: {_HINT}") from exc
    resource = Resource.create({"service.name": "chatlayers"})
    tracer = TracerProvider(resource=resource)
    tracer.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    reader = PeriodicExportingMetricReader(ConsoleMetricExporter(out=sys.stderr))
    meter = MeterProvider(resource=resource, metric_readers=[reader])
    return tracer, meter

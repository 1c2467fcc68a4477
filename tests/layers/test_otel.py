"""The ``otel`` layer and the telemetry hook, read back with the OpenTelemetry SDK's in-memory
span exporter and metric reader."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from storage import ChatKey, ChatMessage, InvalidMessageError, open_storage
from storage.abilities import RetentionStorage, find_ability
from storage.config.stack import Stack
from storage.layers.encrypting import new_master_key
from storage.layers.otel import TelemetryChatStorage
from storage.layers.summarizing import SummarizingChatStorage
from storage.message import ToolCall
from storage.stores.memory import InMemoryChatStorage
from storage.telemetry import NULL_SPAN, migration, operation, recorder, recording, span
from storage.telemetry.ids import KeyHasher
from tests.paths import REPO

pytestmark = pytest.mark.anyio

SECRET = "telemetry-test-secret"
KEY = ChatKey("ana.kim@example.com", "session-7f3a-private", "billing-agent-x")
EMAIL, PHONE, CARD = "ana.kim@example.com", "+1 415 555 0132", "4111 1111 1111 1111"
CONVERSATION = [
    ChatMessage("system", "You are the billing agent of Northwind."),
    ChatMessage("user", f"Hi, my email is {EMAIL} and my phone is {PHONE}."),
    ChatMessage(
        "assistant",
        None,
        tool_calls=(ToolCall("call_1", "find_customer", json.dumps({"email": EMAIL})),),
    ),
    ChatMessage("tool", json.dumps({"customer": "cus_88213", "card": CARD}), tool_call_id="call_1"),
    ChatMessage("assistant", "I found your account, the card ending in 1111 is on file."),
    ChatMessage("user", "Please refund order ORD-55121 to that card."),
    ChatMessage("assistant", "Done: ORD-55121 is refunded, 3 to 5 business days."),
    ChatMessage("user", "Thanks! Also update my phone to +1 415 555 0199."),
    ChatMessage("assistant", "Your phone number is updated."),
]


@attrs.define
class Otel:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.name == name]

    def metric_points(self) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {}
        data = self.metrics.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    out.setdefault(metric.name, []).extend(metric.data.data_points)
        return out

    def counter(self, name: str, **labels: str) -> int:
        total = 0
        for point in self.metric_points().get(name, []):
            if all(point.attributes.get(k) == v for k, v in labels.items()):
                total += point.value
        return total


@pytest.fixture
def otel() -> Iterator[Otel]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Otel(spans, reader, tracer_provider, meter_provider)
    tracer_provider.shutdown()
    meter_provider.shutdown()


def stack(otel: Otel, *layers: dict[str, Any], store: str = "memory://") -> Stack:
    """``otel::<layers>::<store>`` built from a dict config, the providers given in code."""
    top = {
        "type": "otel",
        "secret": SECRET,
        "tracer_provider": otel.tracer_provider,
        "meter_provider": otel.meter_provider,
    }
    return open_storage({"store": {"url": store}, "layers": [top, *layers]})


def attributes_of(span: ReadableSpan) -> dict[str, Any]:
    """A span's attributes; the test knows each one's type from the layer that set it."""
    return dict(span.attributes or {})


def digest(domain: str, *parts: str) -> str:
    message = domain.encode() + b"".join(b"\x00" + p.encode() for p in parts)
    return hmac.new(SECRET.encode(), message, hashlib.sha256).hexdigest()[:16]


def strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from strings(item)


def exported_strings(otel: Otel) -> list[str]:
    """Every string an exporter would send: span names, attribute keys and values, event
    names and attributes, status descriptions, metric names and data-point attributes."""
    out: list[str] = []
    for s in otel.finished():
        out.append(s.name)
        for attributes in [s.attributes, *(e.attributes for e in s.events)]:
            for k, v in (attributes or {}).items():
                out.append(k)
                out.extend(strings(v))
        out.extend(e.name for e in s.events)
        if s.status.description:
            out.append(s.status.description)
    for name, points in otel.metric_points().items():
        out.append(name)
        for point in points:
            for k, v in point.attributes.items():
                out.append(k)
                out.extend(strings(v))
    return out


async def test_spans_carry_counts_sizes_and_hashed_ids_never_text_or_pii(otel: Otel) -> None:
    layers = ({"type": "summarize", "trigger_at": 2, "keep_last": 1}, {"type": "scrub"})
    async with stack(otel, *layers) as chats:
        for message in CONVERSATION:
            await chats.save(KEY, message)
            await chats.fetch(KEY)
        await chats.fetch(KEY, limit=3)
        await chats.fetch_all_chats(KEY.user_id, KEY.session_id)
        with pytest.raises(InvalidMessageError):  # an error's message quotes no input
            await chats.save(KEY, ChatMessage("tool", f"no call id {EMAIL}"))
        await chats.delete(KEY)
    forbidden = {EMAIL, PHONE, CARD, "+1 415 555 0199", "cus_88213", "ORD-55121"}
    forbidden |= {KEY.user_id, KEY.session_id, KEY.agent_id}
    forbidden |= {m.text for m in CONVERSATION if m.text}
    exported = exported_strings(otel)
    assert exported
    for value in exported:
        for secret in forbidden:
            assert secret not in value, (secret, value)
    saves = otel.named("chatlayers.save")
    assert len(saves) == len(CONVERSATION) + 1
    first = attributes_of(saves[0])
    assert first["chatlayers.user.hash"] == digest("user", KEY.user_id)
    assert first["chatlayers.session.hash"] == digest("session", KEY.user_id, KEY.session_id)
    assert first["chatlayers.agent.hash"] == digest("agent", KEY.agent_id)
    assert first["chatlayers.messages"] == 1
    assert first["chatlayers.messages.stored"] == 1
    assert first["chatlayers.tokens.raw"] > 0
    assert first["chatlayers.store"] == "memory"
    failed = saves[-1]
    assert not failed.status.is_ok
    assert attributes_of(failed)["error.type"] == "storage.errors.InvalidMessageError"
    fetches = otel.named("chatlayers.fetch")
    last_full = [f for f in fetches if attributes_of(f)["chatlayers.limit"] == -1][-1]
    assert attributes_of(last_full)["chatlayers.summarized"] is True
    assert attributes_of(last_full)["chatlayers.tokens.view"] > 0
    erasure = otel.named("chatlayers.erasure")[0]
    assert attributes_of(erasure)["chatlayers.scope"] == "conversation"


async def test_scrub_spans_are_children_with_pii_by_entity_and_counted(otel: Otel) -> None:
    async with stack(otel, {"type": "scrub"}) as chats:
        await chats.save_messages(KEY, CONVERSATION[:4])
    (save,) = otel.named("chatlayers.save")
    (scrub,) = otel.named("chatlayers.scrub")
    assert scrub.parent is not None
    assert scrub.parent.span_id == save.context.span_id
    assert attributes_of(scrub)["chatlayers.messages"] == 4
    for found in (attributes_of(scrub), attributes_of(save)):  # on the save too
        assert found["chatlayers.pii.EMAIL_ADDRESS"] == 2  # the text and the tool call
        assert found["chatlayers.pii.PHONE_NUMBER"] == 1
        assert found["chatlayers.pii.CREDIT_CARD"] == 1
        assert found["chatlayers.pii"] == 4
    assert attributes_of(save)["chatlayers.operation"] == "save_messages"
    assert otel.counter("chatlayers.pii.found", **{"chatlayers.pii.entity": "EMAIL_ADDRESS"}) == 2
    assert otel.counter("chatlayers.pii.found") == 4
    assert otel.counter("chatlayers.messages.saved") == 4
    (duration,) = [
        p
        for p in otel.metric_points()["chatlayers.operation.duration"]
        if p.attributes["chatlayers.operation"] == "save"
    ]
    assert duration.count == 1
    assert duration.attributes["chatlayers.outcome"] == "ok"


async def test_encryption_spans_and_the_destroyed_data_key_on_erasure(
    otel: Otel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATLAYERS_MASTER_KEYS", new_master_key())
    keyring = {"type": "encrypt", "keyring": str(tmp_path / "k.db"), "create_keyring": True}
    async with stack(otel, {"type": "scrub"}, keyring, store=f"sqlite:///{tmp_path}/c.db") as chats:
        await chats.save(KEY, CONVERSATION[1])
        assert (await chats.fetch(KEY))[0].text.startswith("Hi, my email is <EMAIL_ADDRESS_")
        await chats.delete_user(KEY.user_id)
    (encrypt,) = otel.named("chatlayers.encrypt")
    (save,) = otel.named("chatlayers.save")
    assert encrypt.parent is not None
    assert encrypt.parent.span_id == save.context.span_id
    (decrypt,) = otel.named("chatlayers.decrypt")
    assert attributes_of(decrypt)["chatlayers.messages.opened"] == 1
    (erasure,) = otel.named("chatlayers.erasure")
    assert attributes_of(erasure)["chatlayers.scope"] == "user"
    assert attributes_of(erasure)["chatlayers.user.hash"] == digest("user", KEY.user_id)
    assert attributes_of(erasure)["chatlayers.events.data_key_destroyed"] == 1
    assert [e.name for e in erasure.events] == ["chatlayers.data_key_destroyed"]
    assert otel.counter("chatlayers.erasures", **{"chatlayers.scope": "user"}) == 1
    for value in exported_strings(otel):
        assert EMAIL not in value
        assert "Hi, my email" not in value


async def test_purge_span_counts_what_went(otel: Otel) -> None:
    async with stack(otel, store="memory://?retention=30d") as chats:
        await chats.save_messages(KEY, CONVERSATION[5:8])
        purging = find_ability(chats, RetentionStorage)
        assert purging is not None
        assert await purging.purge(now=datetime.now(UTC) + timedelta(days=40)) == 3
    (purge,) = otel.named("chatlayers.purge")
    assert attributes_of(purge)["chatlayers.messages.purged"] == 3
    assert otel.counter("chatlayers.messages.purged") == 3


async def test_migration_helper_wraps_the_copy_in_one_span(otel: Otel) -> None:
    source = open_storage("memory://")
    async with source, stack(otel) as target:
        await source.save_messages(KEY, CONVERSATION[5:7])
        with migration(source, target) as handle:
            copied = await target.save_messages(KEY, await source.fetch(KEY))
            handle.add("conversations", 1)
            handle.add("messages", len(copied))
    (moved,) = otel.named("chatlayers.migration")
    (save,) = otel.named("chatlayers.save")
    assert save.parent is not None
    assert save.parent.span_id == moved.context.span_id
    assert attributes_of(moved)["chatlayers.conversations"] == 1
    assert attributes_of(moved)["chatlayers.messages"] == 2
    assert otel.counter("chatlayers.migrated.messages") == 2
    assert otel.counter("chatlayers.migrated.conversations") == 1
    with migration(source, open_storage("memory://")) as nothing:  # no otel layer: a no-op
        assert nothing is NULL_SPAN


async def test_migrate_reports_one_migration_span_with_what_it_copied(otel: Otel) -> None:
    """``storage.migrate.migrate`` into an ``otel::`` target: one span, counted copies."""
    from storage.migrate import migrate

    source = open_storage("memory://")
    async with source, stack(otel) as target:
        await source.save_messages(KEY, CONVERSATION[5:7])
        await source.save_messages(ChatKey("u2", "s", "a"), CONVERSATION[5:6])
        report = await migrate(source, target)
        again = await migrate(source, target)
    assert report.messages_copied == 3
    assert again.messages_copied == 0
    first, second = otel.named("chatlayers.migration")
    assert attributes_of(first)["chatlayers.conversations"] == 2
    assert attributes_of(first)["chatlayers.messages"] == 3
    assert attributes_of(second)["chatlayers.skipped"] == 3
    assert otel.counter("chatlayers.migrated.messages") == 3


async def test_without_a_recorder_the_hook_does_nothing(otel: Otel) -> None:
    assert recorder() is None
    assert span("summarize", KEY, messages=3) is NULL_SPAN
    async with stack(otel) as chats:
        listener = chats.inner.telemetry_recorder  # type: ignore[attr-defined]
        with recording(listener):
            assert recorder() is listener
            with span("compaction", KEY, trigger="save") as handle:
                handle.add("messages.before", 9)
        assert recorder() is None
        with operation(open_storage("memory://"), "command") as none:
            assert none is NULL_SPAN
    (compaction,) = otel.named("chatlayers.compaction")
    assert attributes_of(compaction)["chatlayers.messages.before"] == 9
    assert otel.counter("chatlayers.compactions", **{"chatlayers.trigger": "save"}) == 1


def test_hashes_agree_across_processes_with_a_configured_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CHATLAYERS_TELEMETRY_SECRET", SECRET)
    script = (
        "from storage.message import ChatKey; from storage.telemetry.ids import KeyHasher; "
        f"print(KeyHasher().key(ChatKey({KEY.user_id!r}, {KEY.session_id!r}, {KEY.agent_id!r})))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    other = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert other.stdout.strip() == repr(KeyHasher().key(KEY))
    assert KeyHasher().key(KEY)[0] == digest("user", KEY.user_id)
    monkeypatch.delenv("CHATLAYERS_TELEMETRY_SECRET")
    with pytest.warns(RuntimeWarning, match="random per-process secret"):
        unkeyed = KeyHasher()
    assert unkeyed.key(KEY) != KeyHasher(SECRET).key(KEY)


def run_python(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_nothing_of_opentelemetry_is_imported_without_the_layer() -> None:
    done = run_python(
        "import sys, anyio\n"
        "from storage import ChatKey, ChatMessage, open_storage\n"
        "async def main():\n"
        "    async with open_storage('summarize?trigger_at=1::scrub::sqlite://:memory:') as s:\n"
        "        k = ChatKey('u', 's', 'a')\n"
        "        for n in range(6):\n"
        "            await s.save(k, ChatMessage('user', f'mail me at a{n}@example.com'))\n"
        "            await s.save(k, ChatMessage('assistant', 'ok'))\n"
        "            await s.fetch(k)\n"
        "anyio.run(main)\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n",
        CHATLAYERS_PII_SECRET="x",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_without_the_extra_the_layer_names_it() -> None:
    done = run_python(
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # as if not installed\n"
        "from storage import open_storage\n"
        "from storage.errors import ConfigError\n"
        "try:\n"
        "    open_storage('otel::memory://')\n"
        "except ConfigError as exc:\n"
        "    print(exc)\n"
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'chatlayers[otel]'" in done.stdout


def test_a_url_stack_reports_to_the_applications_global_providers() -> None:
    done = run_python(
        "import anyio\n"
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
        "from opentelemetry.sdk.trace.export.in_memory_span_exporter import "
        "InMemorySpanExporter\n"
        "exporter = InMemorySpanExporter()\n"
        "provider = TracerProvider()\n"
        "provider.add_span_processor(SimpleSpanProcessor(exporter))\n"
        "trace.set_tracer_provider(provider)\n"
        "from storage import ChatKey, ChatMessage, open_storage\n"
        "async def main():\n"
        "    async with open_storage('otel?secret_env=SECRET::scrub::memory://') as s:\n"
        "        await s.save(ChatKey('u', 's', 'a'), ChatMessage('user', 'a@example.com'))\n"
        "anyio.run(main)\n"
        "print(sorted(s.name for s in exporter.get_finished_spans()))\n",
        SECRET="from-the-environment",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['chatlayers.save', 'chatlayers.scrub']"


def test_a_cli_command_is_one_span_with_the_console_exporter(tmp_path: Path) -> None:
    conversation = {"id": "c1", "messages": [m.to_openai() for m in CONVERSATION]}
    (tmp_path / "one.jsonl").write_text(json.dumps(conversation) + "\n")
    url = f"otel?exporter=console&secret_env=SECRET::scrub::sqlite:///{tmp_path / 'c.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "storage.cli", "--url", url, "replay", "one.jsonl", "--json"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), "SECRET": "s"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)  # the data alone on stdout
    assert '"name": "chatlayers.command"' in done.stderr
    assert '"chatlayers.command": "replay"' in done.stderr
    assert '"name": "chatlayers.scrub"' in done.stderr
    assert "chatlayers.operation.duration" in done.stderr  # metrics flushed at close
    assert EMAIL not in done.stderr


# --- the summarizing layer's compactions and summarizer calls --------------------------------


def parent_of(otel: Otel, child: ReadableSpan) -> ReadableSpan:
    assert child.parent is not None
    (found,) = [s for s in otel.finished() if s.context.span_id == child.parent.span_id]
    return found


async def test_inline_compactions_and_summarizer_calls(otel: Otel) -> None:
    summarize = {"type": "summarize", "trigger_at": 2, "keep_last": 1}
    async with stack(otel, summarize, {"type": "scrub"}) as chats:
        for message in CONVERSATION:
            await chats.save(KEY, message)
            await chats.fetch(KEY)
        layer = chats.find(SummarizingChatStorage)
        assert layer is not None
        calls = layer.summarizer_calls
    assert calls > 0
    calls_spans = otel.named("chatlayers.summarize")
    assert len(calls_spans) == calls
    compactions = otel.named("chatlayers.compaction")
    installed = [c for c in compactions if attributes_of(c)["chatlayers.outcome"] == "installed"]
    assert installed
    for compaction in installed:
        a = attributes_of(compaction)
        assert (a["chatlayers.trigger"], a["chatlayers.mode"], a["chatlayers.kind"]) == (
            "inline",
            "store",
            "summary",
        )
        assert a["chatlayers.user.hash"] == digest("user", KEY.user_id)
        # (a summary of so short a conversation can hold more tokens than it replaces)
        assert a["chatlayers.tokens.after"] > 0
        assert a["chatlayers.tokens.before"] > 0
        assert a["chatlayers.messages.after"] < a["chatlayers.messages.before"]
        assert parent_of(otel, compaction).name in ("chatlayers.save", "chatlayers.fetch")
    for call in calls_spans:
        assert parent_of(otel, call).name == "chatlayers.compaction"
        a = attributes_of(call)
        assert a["chatlayers.outcome"] == "ok"
        assert a["chatlayers.summarizer"] == "ExtractiveSummarizer"
        assert a["chatlayers.messages.result"] <= a["chatlayers.messages"]
        assert a["chatlayers.tokens.view"] > 0
    assert otel.counter("chatlayers.summarizer.calls", **{"chatlayers.outcome": "ok"}) == calls
    assert otel.counter("chatlayers.compactions", **{"chatlayers.outcome": "installed"}) == len(
        installed
    )
    (latency,) = otel.metric_points()["chatlayers.summarizer.duration"]
    assert latency.count == calls


async def test_background_summaries_report_under_the_save_that_scheduled_them(
    otel: Otel,
) -> None:
    summarize = {"type": "summarize", "trigger_at": 2, "keep_last": 1, "background": True}
    async with stack(otel, summarize) as chats:
        layer = chats.find(SummarizingChatStorage)
        assert layer is not None
        for message in CONVERSATION:
            await chats.save(KEY, message)
            await chats.fetch(KEY)
        await layer.drain()
        calls = layer.summarizer_calls
    compactions = otel.named("chatlayers.compaction")
    assert compactions
    assert {attributes_of(c)["chatlayers.trigger"] for c in compactions} == {"background"}
    # The task inherited the context of the save or fetch that scheduled it.
    assert {parent_of(otel, c).name for c in compactions} <= {
        "chatlayers.save",
        "chatlayers.fetch",
    }
    assert len(otel.named("chatlayers.summarize")) == calls > 0


async def test_failed_and_timed_out_summarizer_calls(otel: Otel) -> None:
    async def failing(history: list[ChatMessage], keep_last: int) -> list[ChatMessage]:
        raise RuntimeError(f"the model refused {EMAIL}")

    async def slow(history: list[ChatMessage], keep_last: int) -> list[ChatMessage]:
        await anyio.sleep(10)
        return history

    for summarizer, outcome in ((failing, "error"), (slow, "timeout")):
        layer = SummarizingChatStorage(
            InMemoryChatStorage(),
            summarizer,
            trigger_at=1,
            keep_last=1,
            on_error="fallback",
            timeout=0.05,
        )
        chats = TelemetryChatStorage(
            layer,
            secret=SECRET,
            tracer_provider=otel.tracer_provider,
            meter_provider=otel.meter_provider,
        )
        for message in CONVERSATION[5:9]:
            await chats.save(KEY, message)
        await chats.fetch(KEY)  # activation: the call fails, the raw view is served
        await chats.aclose()
        (call,) = [
            s
            for s in otel.named("chatlayers.summarize")
            if attributes_of(s)["chatlayers.outcome"] == outcome
        ]
        assert not call.status.is_ok
        compaction = parent_of(otel, call)
        assert attributes_of(compaction)["chatlayers.outcome"] == "error"
        assert otel.counter("chatlayers.summarizer.calls", **{"chatlayers.outcome": outcome}) == 1
    for value in exported_strings(otel):
        assert EMAIL not in value  # not even from the summarizer's error message


async def test_memory_summaries_and_a_manual_compaction_inside_a_command(otel: Otel) -> None:
    summarize = {"type": "summarize", "trigger_at": 2, "keep_last": 1, "summaries": "memory"}
    async with stack(otel, summarize) as chats:
        for message in CONVERSATION:
            await chats.save(KEY, message)
        await chats.fetch(KEY)
        layer = chats.find(SummarizingChatStorage)
        assert layer is not None
        with operation(chats, "command", command="compact"):
            await layer.compact(KEY, summary=ChatMessage("system", "A summary written by hand."))
    modes = {attributes_of(c)["chatlayers.mode"] for c in otel.named("chatlayers.compaction")}
    assert modes == {"memory"}
    manual = [
        c
        for c in otel.named("chatlayers.compaction")
        if attributes_of(c)["chatlayers.trigger"] == "manual"
    ]
    assert len(manual) == 1
    assert attributes_of(manual[0])["chatlayers.kind"] == "given"
    assert attributes_of(manual[0])["chatlayers.outcome"] == "installed"
    assert parent_of(otel, manual[0]).name == "chatlayers.command"


async def test_a_second_worker_serves_the_first_workers_checkpoints_without_a_call(
    otel: Otel, tmp_path: Path
) -> None:
    other = Otel(InMemorySpanExporter(), InMemoryMetricReader(), TracerProvider(), None)  # type: ignore[arg-type]
    other.tracer_provider.add_span_processor(SimpleSpanProcessor(other.spans))
    other.meter_provider = MeterProvider(metric_readers=[other.metrics])
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    summarize = {"type": "summarize", "trigger_at": 2, "keep_last": 1}
    async with (
        stack(otel, summarize, store=url) as first,
        stack(other, summarize, store=url) as second,
    ):
        for message in CONVERSATION[:5]:
            await first.save(KEY, message)
        await first.fetch(KEY)  # the first worker summarizes (and from now on, at each save)
        await second.fetch(KEY)  # the second loads its checkpoint
        for message in CONVERSATION[5:]:
            await first.save(KEY, message)  # the first worker summarizes, storing checkpoints
        await second.fetch(KEY)  # the second reads them back
    made = otel.counter("chatlayers.compactions", **{"chatlayers.outcome": "installed"})
    assert made > 0
    assert otel.counter("chatlayers.summarizer.calls") > 0
    assert other.named("chatlayers.summarize") == []
    assert other.counter("chatlayers.summarizer.calls") == 0
    last = other.named("chatlayers.fetch")[-1]
    assert attributes_of(last)["chatlayers.summarized"] is True
    assert attributes_of(last)["chatlayers.user.hash"] == digest("user", KEY.user_id)  # correlated

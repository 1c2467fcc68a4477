"""Every view a summarizing stack serves is accepted by the model clients themselves
(:mod:`tests.clients`: the Qwen3.5 and Mistral chat-template guards, mistral-common, litellm's
Anthropic, Gemini and Bedrock transforms, ``validate_history``), on every path that serves a
view: normal, memory mode, background, fallback (outage, lease busy, dead lease holder),
``limit``, ``compact(summary=)``, after ``replace``, after a retention purge, cold keys with
and without a checkpoint; on the shipped conversations and on generated agent traffic.

A view is checked where a client would send it: after each saved user message or tool
result (the request then ends with what the model answers)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from storage.cli.conversation_file import read_conversations
from storage.layers.summarizing import SummarizingChatStorage
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.protocol import ChatStorage
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from summarizers.extractive import ExtractiveSummarizer
from tests.clients import CLIENTS, refusals
from tests.paths import REPO

pytestmark = pytest.mark.anyio

DATA = REPO / "examples" / "data"
SHIPPED = [
    DATA / "tau_bench_airline_gpt4o_trial0.openai.jsonl",
    DATA / "swe_agent_marshmallow_1867_fc.openai.jsonl",
    DATA / "oasst_en_100.openai.jsonl",
]


def shipped() -> list[list[ChatMessage]]:
    return [list(c.messages) for c in read_conversations(SHIPPED)]


def agent_traffic(seed: int, conversations: int = 6) -> list[list[ChatMessage]]:
    """Generated agent runs: a system prompt, user turns, each with 0-6 tool-call groups
    (some with parallel calls, reused call ids), a final answer most turns."""
    rng = random.Random(seed)
    out = []
    for c in range(conversations):
        messages = [ChatMessage("system", f"You are agent {c}. Use the tools; be brief.")]
        for t in range(rng.randint(3, 9)):
            messages.append(ChatMessage("user", f"Task {t}: look up order {rng.randint(1, 999)}."))
            for g in range(rng.choice([0, 1, 2, 3, 6])):
                calls = tuple(
                    ToolCall(
                        f"call_{g}_{k}",
                        rng.choice(["search", "fetch", "bash"]),
                        f'{{"q": "{c}.{t}.{g}.{k}"}}',
                    )
                    for k in range(rng.choice([1, 1, 2]))
                )
                text = rng.choice([None, "Let me check."])
                messages.append(ChatMessage("assistant", text, calls))
                messages += [
                    ChatMessage(
                        "tool", f"result {t}.{g}: " + "x " * rng.randint(1, 80), tool_call_id=k.id
                    )
                    for k in calls
                ]
            messages.append(ChatMessage("assistant", f"Done with task {t}."))
        out.append(messages)
    return out


NEXT = ChatMessage("user", "And the next question?")


class Tally:
    """Views checked per path, and every refusal (client, path, why)."""

    def __init__(self) -> None:
        self.checked: Counter[str] = Counter()
        self.refused: list[tuple[str, str, str]] = []

    def check(self, path: str, view: list[ChatMessage]) -> None:
        """Check ``view`` as a request: one ending with an answer is sent with a new user
        message after it, as a client does."""
        self.checked[path] += 1
        if view and view[-1].role == "assistant" and not view[-1].tool_calls:
            view = [*view, NEXT]
        for client, why in refusals(view).items():
            self.refused.append((path, client, why))

    def assert_clean(self, *paths: str) -> None:
        assert not self.refused, self.refused[:5]
        for path in paths:
            assert self.checked[path] > 0, f"no view checked on the {path} path"


def request_points(messages: list[ChatMessage]) -> Iterator[tuple[int, ChatMessage]]:
    """Each message, and whether a model call follows it (after a user message or the last
    result of a tool-call group)."""
    for n, message in enumerate(messages):
        nxt = messages[n + 1] if n + 1 < len(messages) else None
        asks = message.role == "user" or (
            message.role == "tool" and (nxt is None or nxt.role != "tool")
        )
        yield (1 if asks else 0), message


async def replay(
    layer: ChatStorage,
    key: ChatKey,
    messages: list[ChatMessage],
    tally: Tally,
    path: str,
    *,
    limits: tuple[int, ...] = (),
) -> None:
    for asks, message in request_points(messages):
        await layer.save(key, message)
        if asks:
            tally.check(path, await layer.fetch(key))
            for limit in limits:
                tally.check(f"limit={limit}", await layer.fetch(key, limit=limit))


def layer_over(store: ChatStorage, **options: Any) -> SummarizingChatStorage:
    options.setdefault("trigger_at", 3)
    options.setdefault("keep_last", 1)
    return SummarizingChatStorage(store, ExtractiveSummarizer(), **options)


def conversations(source: str) -> list[list[ChatMessage]]:
    return shipped() if source == "shipped" else agent_traffic(18)


class Failing:
    async def __call__(self, buffer: list[ChatMessage], keep_last: int) -> list[ChatMessage]:
        raise ConnectionError("model down")


@pytest.mark.parametrize("source", ["shipped", "agent"])
async def test_normal_memory_and_limit_views_are_accepted(tmp_path: Path, source: str) -> None:
    tally = Tally()
    store = SQLiteChatStorage(tmp_path / "v.db")
    layer = layer_over(store)
    memory = layer_over(InMemoryChatStorage(), summaries="memory")
    for n, messages in enumerate(conversations(source)):
        key = ChatKey("u", f"s{n}", "a")
        await replay(layer, key, messages, tally, "normal", limits=(1, 3, 5))
        await replay(memory, key, messages, tally, "memory")
        cold = layer_over(SQLiteChatStorage(tmp_path / "v.db"))  # a restart: the checkpoint
        tally.check("cold with checkpoint", await cold.fetch(key))
        await cold.aclose()
    tally.assert_clean("normal", "memory", "limit=1", "limit=3", "limit=5", "cold with checkpoint")
    assert layer.summaries_made > 0
    assert memory.summaries_made > 0
    await layer.aclose()


@pytest.mark.parametrize("source", ["shipped", "agent"])
async def test_background_and_fallback_views_are_accepted(tmp_path: Path, source: str) -> None:
    tally = Tally()
    background = layer_over(InMemoryChatStorage(), background=True)
    outage = layer_over(InMemoryChatStorage(), on_error="fallback")
    outage.summarizer = Failing()
    busy_store = InMemoryChatStorage()
    busy = layer_over(busy_store, on_error="fallback")
    async with background:
        for n, messages in enumerate(conversations(source)):
            key = ChatKey("u", f"s{n}", "a")
            for asks, message in request_points(messages):
                await background.save(key, message)
                if asks:
                    tally.check("background", await background.fetch(key))
                    await background.drain()
                    tally.check("background", await background.fetch(key))
            await replay(outage, key, messages, tally, "fallback: outage", limits=(3,))
            # Another worker (alive, or dead until its lease expires) holds the lease.
            assert await busy_store.acquire_lease(key, "another worker", 3600)
            await replay(busy, key, messages, tally, "fallback: lease busy")
    assert outage.summary_failures > 0
    assert busy.lease_busy > 0
    tally.assert_clean("background", "fallback: outage", "fallback: lease busy", "limit=3")


async def test_compact_replace_purge_and_cold_views_are_accepted() -> None:
    tally = Tally()
    store = InMemoryChatStorage(retention="1h")
    layer = layer_over(store)
    start = datetime(2030, 1, 1, tzinfo=UTC)
    for n, messages in enumerate([*shipped()[:20], *agent_traffic(7)]):
        key = ChatKey("u", f"s{n}", "a")
        # One minute apart, so a purge can cut anywhere, mid-turn included.
        timed = [
            attrs.evolve(m, created_at=start + timedelta(minutes=i)) for i, m in enumerate(messages)
        ]
        for message in timed:
            await layer.save(key, message)
        await layer.compact(key, summary="The user and the agent worked through the tasks.")
        await layer.save(
            key, ChatMessage("user", "One more thing.", created_at=timed[-1].created_at)
        )
        tally.check("compact(summary=)", await layer.fetch(key))
        users = [i for i, m in enumerate(timed) if m.role == "user"]
        prefix = timed[: users[len(users) // 2] + 1]  # up to a user message: a request
        await layer.replace(key, prefix)
        tally.check("after replace", await layer.fetch(key))
        await layer.replace(key, timed)
        cut = start + timedelta(minutes=n % len(timed), seconds=30)
        await layer.purge(now=cut + timedelta(hours=1))
        if any(m.role == "user" for m in await store.fetch(key)):
            tally.check("after purge", await layer.fetch(key))
        fresh = layer_over(InMemoryChatStorage())  # cold, no checkpoint, over the budget
        await fresh.inner.save_messages(key, messages)
        tally.check("cold without checkpoint", await fresh.fetch(key))
    tally.assert_clean(
        "compact(summary=)", "after replace", "after purge", "cold without checkpoint"
    )


def test_the_clients_refuse_the_old_two_system_shape() -> None:
    """The checks can fail: a second system message and two user messages in a row."""
    old = [
        ChatMessage("system", "You are an airline agent."),
        ChatMessage("system", "Summary of the earlier conversation: ..."),
        ChatMessage("user", "Change my flight."),
    ]
    refused = refusals(old)
    assert {"qwen", "mistral", "validate"} <= set(refused)
    assert "System message must be at the beginning." in refused["qwen"]
    assert "must alternate" in refused["mistral"] or "Only user" in refused["mistral"]
    doubled = [old[0], ChatMessage("user", "a"), ChatMessage("user", "b")]
    assert "mistral" in refusals(doubled)
    unanswered = [
        old[0],
        ChatMessage("user", "a"),
        ChatMessage("assistant", None, (ToolCall("c1", "f", "{}"),)),
        ChatMessage("user", "b"),
    ]
    assert "anthropic" in refusals(unanswered)
    orphan = [old[0], ChatMessage("user", "a"), ChatMessage("tool", "r", tool_call_id="zz")]
    assert "Unexpected role 'tool'" in refusals(orphan)["mistral-common"]
    assert set(CLIENTS) >= set(refused)

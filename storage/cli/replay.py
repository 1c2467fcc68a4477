"""The replay job: save real conversations through a stack as an orchestrator would.

Each conversation (read by :func:`storage.cli.conversation_file.read_conversations`) is saved one
message at a time, with a fetch before every assistant message (when an orchestrator calls
the model) and one at the end. The :class:`ReplayReport` holds what that did: messages
stored, PII found by the scrubbing layers, summaries made, the raw record against the model's
view in messages and tokens (also per set: per file), the fetch latencies, and what a save
that triggered a summary cost next to a plain save (inline or background summarizing).

The stack to replay agent traffic through is :data:`REPLAY_URL`: a token budget of 4,000
tokens (see its docstring for why).
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Final

import attrs

from storage.cli.conversation_file import Conversation
from storage.cli.words import duration
from storage.config.stack import Stack, components
from storage.errors import ConfigError
from storage.message import ChatMessage

logger = logging.getLogger(__name__)

__all__ = [
    "REPLAY_URL",
    "ReplayReport",
    "SetFigures",
    "pii_counts",
    "replay",
    "set_name",
    "summarizing_layers",
    "token_counter",
    "total",
]

REPLAY_URL: Final = "summarize?trigger_tokens=4000::scrub::sqlite:///chatlayers.db"
"""The stack for replaying agent traffic: summaries by a token budget of 4,000 tokens
(``keep_tokens`` defaults to a quarter, 1,000). Why 4,000: on the shipped sets no ordinary chat
reaches it (the longest OpenAssistant conversation is 2,344 tokens, and summarizing a short chat
only loses detail), while 19 of the 50 tau-bench airline runs (3,595 tokens at the median, up
to 9,036) and the SWE-agent trajectory (7,209) do; it leaves about 2,700 tokens above the
1,255-token airline policy prompt, which stays pinned verbatim. A real deployment sets it from
its model instead (``trigger_fraction=0.5&model=...``)."""


@attrs.define
class SetFigures:
    """The figures of one replayed file (a "set").

    Attributes:
        conversations: conversations in it.
        summarized: conversations whose final view starts with a summary or trimmed copy.
        raw_tokens: tokens of their raw records (``None``: no tokenizer).
        view_tokens: tokens of their final model views (``None``: no tokenizer).
        summarizer_calls: summarizer calls their saves and fetches caused.
    """

    conversations: int = 0
    summarized: int = 0
    raw_tokens: int | None = 0
    view_tokens: int | None = 0
    summarizer_calls: int = 0


@attrs.define
class ReplayReport:
    """The figures of one replay (see ``chatlayers replay``).

    Attributes:
        conversations: conversations replayed.
        messages_read: messages in the files.
        messages_stored: messages the stack stored (new ids).
        messages_skipped: messages already stored (same id).
        raw_messages: messages in the innermost store's record after the replay.
        view_messages: messages the last fetch of each conversation returned (the model view).
        raw_tokens: tokens of the raw records (``None`` when no tokenizer is available).
        view_tokens: tokens of the model views (``None`` likewise).
        fetch_seconds: the latency of every fetch, in seconds.
        pii: PII found, by entity, by the stack's scrubbing layers in the messages this replay
            stored (a message already stored is not counted again).
        summaries_made: summaries made by the stack's summarizing layers.
        scrubbing: the stack has a scrubbing layer.
        summarizing: the stack has a summarizing layer.
        sets: per replayed file (its name without ``.openai.jsonl``), in order.
        summarizer_calls: summarizer calls of the stack's summarizing layers.
        background: the summarizing layers make summaries in the background.
        save_seconds: the latency of every save that triggered no summary, in seconds.
        trigger_save_seconds: the latency of every save that triggered one.
    """

    conversations: int = 0
    messages_read: int = 0
    messages_stored: int = 0
    messages_skipped: int = 0
    raw_messages: int = 0
    view_messages: int = 0
    raw_tokens: int | None = 0
    view_tokens: int | None = 0
    fetch_seconds: list[float] = attrs.field(factory=list)
    pii: Counter[str] = attrs.field(factory=Counter)
    summaries_made: int = 0
    scrubbing: bool = False
    summarizing: bool = False
    sets: dict[str, SetFigures] = attrs.field(factory=dict)
    summarizer_calls: int = 0
    background: bool = False
    save_seconds: list[float] = attrs.field(factory=list)
    trigger_save_seconds: list[float] = attrs.field(factory=list)

    def percentile(self, q: float, values: Sequence[float] | None = None) -> float | None:
        """The ``q`` quantile (0..1) of ``values`` (default: the fetch latencies) in seconds
        (nearest rank); ``None`` when there are none."""
        data = self.fetch_seconds if values is None else values
        if not data:
            return None
        ordered = sorted(data)
        rank = max(1, min(len(ordered), math.ceil(q * len(ordered))))
        return ordered[rank - 1]

    def set_rows(self) -> list[tuple[str, int, int, str, str, int]]:
        """One row per set: (set, conversations, summarized, raw tokens, view tokens,
        summarizer calls); tokens as ``"n/a"`` without a tokenizer."""
        return [
            (
                name,
                figures.conversations,
                figures.summarized,
                "n/a" if figures.raw_tokens is None else f"{figures.raw_tokens:,}",
                "n/a" if figures.view_tokens is None else f"{figures.view_tokens:,}",
                figures.summarizer_calls,
            )
            for name, figures in self.sets.items()
        ]

    def save_rows(self) -> list[tuple[str, str]]:
        """What a save cost: plain saves and saves that triggered a summary, p50 and max
        (:func:`~storage.cli.words.duration`)."""
        rows = []
        mode = "background" if self.background else "inline"
        for label, values in (
            ("save p50", self.save_seconds),
            (f"save triggering a summary p50 ({mode})", self.trigger_save_seconds),
            (f"save triggering a summary max ({mode})", self.trigger_save_seconds),
        ):
            q = 1.0 if label.endswith(f"max ({mode})") else 0.5
            value = self.percentile(q, values)
            rows.append((label, "-" if value is None else duration(value)))
        return rows


async def replay(
    stack: Stack,
    conversations: Sequence[Conversation],
    *,
    fresh: bool = False,
    fetch_limit: int | None = None,
    model: str = "gpt-4o",
    on_message: Callable[[], None] | None = None,
) -> ReplayReport:
    """Save every conversation one message at a time, fetching before every assistant message
    (as an orchestrator does before calling the model) and once at the end.

    Args:
        stack: the stack to write through.
        conversations: from :func:`storage.cli.conversation_file.read_conversations`.
        fresh: delete each conversation's key first.
        fetch_limit: the ``limit`` of each fetch (``None``: the whole history).
        model: the model whose tokenizer counts tokens.
        on_message: called after each message (progress).

    Raises:
        ChatStorageError: from the stack (the messages saved before it stay stored).
    """
    report = ReplayReport()
    layers = summarizing_layers(stack)
    report.background = any(getattr(layer, "background", False) for layer in layers)
    async with _background_tasks(layers):
        await _replay(stack, conversations, report, layers, fresh, fetch_limit, model, on_message)
    return report


async def _replay(
    stack: Stack,
    conversations: Sequence[Conversation],
    report: ReplayReport,
    layers: list[Any],
    fresh: bool,
    fetch_limit: int | None,
    model: str,
    on_message: Callable[[], None] | None,
) -> None:
    perf = time.perf_counter
    count = token_counter(model)
    raw_tokens = view_tokens = 0
    start_counts = pii_counts(stack)
    repeated: Counter[str] = Counter()
    start_calls = total(layers, "summarizer_calls")
    for conversation in conversations:
        key = conversation.key
        if fresh:
            await stack.delete(key)
        messages = conversation.messages
        view: list[ChatMessage] = []
        figures = report.sets.setdefault(set_name(conversation.where), SetFigures())
        calls_before = total(layers, "summarizer_calls")
        for index, message in enumerate(messages):
            before = pii_counts(stack)
            triggers = total(layers, "saves_triggering")
            started = perf()
            stored = await stack.save(key, message)
            took = perf() - started
            if total(layers, "saves_triggering") > triggers:
                report.trigger_save_seconds.append(took)
            else:
                report.save_seconds.append(took)
            report.messages_stored += len(stored)
            report.messages_skipped += 1 - len(stored)
            if not stored:
                # Already stored (a re-run): the scrubber scanned it again, but that PII was
                # counted when it was first stored.
                repeated.update(pii_counts(stack) - before)
            last = index == len(messages) - 1
            if last or messages[index + 1].role == "assistant":
                start = perf()
                view = await stack.fetch(key, limit=fetch_limit)
                report.fetch_seconds.append(perf() - start)
            if on_message is not None:
                on_message()
        if report.background:  # the view once this conversation's summaries are made
            for layer in layers:
                await layer.drain()
            view = await stack.fetch(key, limit=fetch_limit)
        raw = await stack.base.fetch(key)
        report.conversations += 1
        report.messages_read += len(messages)
        report.raw_messages += len(raw)
        report.view_messages += len(view)
        figures.conversations += 1
        figures.summarized += any(m.is_summary for m in view)
        figures.summarizer_calls += total(layers, "summarizer_calls") - calls_before
        if count is not None:
            raw_count, view_count = count(raw), count(view)
            raw_tokens += raw_count
            view_tokens += view_count
            figures.raw_tokens = (figures.raw_tokens or 0) + raw_count
            figures.view_tokens = (figures.view_tokens or 0) + view_count
        else:
            figures.raw_tokens = figures.view_tokens = None
    report.raw_tokens = raw_tokens if count is not None else None
    report.view_tokens = view_tokens if count is not None else None
    report.summarizer_calls = total(layers, "summarizer_calls") - start_calls
    _count_layer_work(stack, report)
    report.pii = report.pii - start_counts - repeated


def set_name(where: str) -> str:
    """The set a conversation belongs to: its file's name without ``.openai.jsonl``."""
    name = Path(where.rsplit(":", 1)[0]).name
    for suffix in (".openai.jsonl", ".jsonl", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def summarizing_layers(stack: object) -> list[Any]:
    """The summarizing layers of a stack or a chain of layers (anything counting
    ``summarizer_calls``)."""
    return [c for c in components(stack) if isinstance(getattr(c, "summarizer_calls", None), int)]


def total(layers: Sequence[Any], name: str) -> int:
    """The sum of the counter ``name`` over ``layers``."""
    return sum(int(getattr(layer, name, 0)) for layer in layers)


@asynccontextmanager
async def _background_tasks(layers: Sequence[Any]) -> AsyncIterator[None]:
    """Open the task group of every background summarizing layer for the replay."""
    async with AsyncExitStack() as stack:
        for layer in layers:
            # A stack entered with ``async with`` has opened them already.
            if getattr(layer, "background", False) and not getattr(layer, "background_open", True):
                await stack.enter_async_context(layer.background_tasks())
        yield


def pii_counts(stack: object) -> Counter[str]:
    """PII found so far by the scrubbing layers of ``stack`` (a stack or a chain of layers),
    by entity: the ``counts`` of every component's transform."""
    total: Counter[str] = Counter()
    for component in components(stack):
        counts = getattr(getattr(component, "transform", None), "counts", None)
        if isinstance(counts, Mapping):
            total.update(counts)
    return total


def token_counter(model: str) -> Callable[[Sequence[ChatMessage]], int] | None:
    """A token counter, or ``None`` (sizes shown in messages only) when tiktoken's encoding
    files are not on this machine: replay must work on a plain install without the ``llm``
    extra, whose package ships them."""
    from storage.tokens import count_tokens

    try:
        count_tokens([ChatMessage("user", "probe")], model=model)
    except ConfigError as exc:
        logger.warning("token counts unavailable: %s", exc)
        return None

    def count(messages: Sequence[ChatMessage]) -> int:
        return count_tokens(messages, model=model)

    return count


def _count_layer_work(stack: Stack, report: ReplayReport) -> None:
    """Add up what the stack's layers report: PII found by entity (a transform's ``counts``)
    and summaries made (``summaries_made``)."""
    for component in stack.components():
        counts = getattr(getattr(component, "transform", None), "counts", None)
        if isinstance(counts, Mapping):
            report.scrubbing = True
            report.pii.update(counts)
        made = getattr(component, "summaries_made", None)
        if isinstance(made, int):
            report.summarizing = True
            report.summaries_made += made

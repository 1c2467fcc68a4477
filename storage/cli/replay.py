"""The replay job: save real conversations through a stack as an orchestrator would.

Each conversation (read by :func:`storage.cli.conversation_file.read_conversations`) is saved one
message at a time, with a fetch before every assistant message (when an orchestrator calls
the model) and one at the end. The :class:`ReplayReport` holds what that did: messages
stored, PII found by the scrubbing layers, summaries made, the raw record against the model's
view in messages and tokens, and the fetch latencies.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

import attrs

from storage.cli.conversation_file import Conversation
from storage.config.stack import Stack
from storage.errors import ConfigError
from storage.message import ChatMessage

logger = logging.getLogger(__name__)

__all__ = ["ReplayReport", "replay"]


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

    def percentile(self, q: float) -> float | None:
        """The ``q`` quantile (0..1) of the fetch latencies in seconds (nearest rank)."""
        if not self.fetch_seconds:
            return None
        ordered = sorted(self.fetch_seconds)
        rank = max(1, min(len(ordered), math.ceil(q * len(ordered))))
        return ordered[rank - 1]


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
    perf = time.perf_counter
    count = _token_counter(model)
    raw_tokens = view_tokens = 0
    start_counts = _pii_counts(stack)
    repeated: Counter[str] = Counter()
    for conversation in conversations:
        key = conversation.key
        if fresh:
            await stack.delete(key)
        messages = conversation.messages
        view: list[ChatMessage] = []
        for index, message in enumerate(messages):
            before = _pii_counts(stack)
            stored = await stack.save(key, message)
            report.messages_stored += len(stored)
            report.messages_skipped += 1 - len(stored)
            if not stored:
                # Already stored (a re-run): the scrubber scanned it again, but that PII was
                # counted when it was first stored.
                repeated.update(_pii_counts(stack) - before)
            last = index == len(messages) - 1
            if last or messages[index + 1].role == "assistant":
                start = perf()
                view = await stack.fetch(key, limit=fetch_limit)
                report.fetch_seconds.append(perf() - start)
            if on_message is not None:
                on_message()
        raw = await stack.base.fetch(key)
        report.conversations += 1
        report.messages_read += len(messages)
        report.raw_messages += len(raw)
        report.view_messages += len(view)
        if count is not None:
            raw_tokens += count(raw)
            view_tokens += count(view)
    report.raw_tokens = raw_tokens if count is not None else None
    report.view_tokens = view_tokens if count is not None else None
    _count_layer_work(stack, report)
    report.pii = report.pii - start_counts - repeated
    return report


def _pii_counts(stack: Stack) -> Counter[str]:
    """PII found so far by the stack's scrubbing layers, by entity."""
    total: Counter[str] = Counter()
    for component in stack.components():
        counts = getattr(getattr(component, "transform", None), "counts", None)
        if isinstance(counts, Mapping):
            total.update(counts)
    return total


def _token_counter(model: str) -> Callable[[Sequence[ChatMessage]], int] | None:
    """A token counter, or ``None`` (sizes shown in messages only) when tiktoken's encoding
    files are not on this machine: replay must work on a plain install without the ``llm``
    extra, whose package ships them."""
    from summarizers.tokens import count_tokens

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

"""``ExtractiveSummarizer``: the default summarizer, offline, deterministic, no model call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import attrs

from storage.errors import ConfigError
from storage.history import split_turns
from storage.message import ChatMessage
from summarizers.render import (
    SummaryPlan,
    build_result,
    content_text,
    first_sentence,
    plan_summary,
    short_arguments,
)

__all__ = ["SUMMARY_ROLES", "ExtractiveSummarizer"]

SUMMARY_ROLES: Final = frozenset({"system", "user", "assistant"})
OMITTED: Final = "- … (earlier turns omitted)"
_MAX_CALLS_SHOWN: Final = 4
_ARGS_CHARS: Final = 60


@attrs.frozen(kw_only=True)
class ExtractiveSummarizer:
    """Summarize by extraction: one line per summarized turn, no model, no network.

    Each turn (a user message and what followed it) becomes one line: the user's request
    (first sentence), the tools called (names and shortened arguments, at most four per turn)
    and the assistant's final answer (first sentence). The prior summary's lines come first;
    when the body exceeds ``max_chars`` the oldest lines are dropped (an ``earlier turns
    omitted`` line says so). The output depends only on the input (the summary message's
    ``id`` is the only random part). The conversation's leading system prompt is kept
    verbatim ahead of the body and not counted in ``max_chars``.

    Args:
        max_chars: bound on the summary body in characters (>= 100); default 2000.
        sentence_chars: bound on each extracted sentence in characters (>= 10); default 160.
        summary_role: role of the summary message: ``"system"`` (default), ``"user"`` or
            ``"assistant"``.

    Raises:
        ConfigError: an argument is out of range.
    """

    max_chars: int = 2000
    sentence_chars: int = 160
    summary_role: str = "system"

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.max_chars, int) or self.max_chars < 100:
            raise ConfigError(f"max_chars must be an int >= 100, got {self.max_chars!r}")
        if not isinstance(self.sentence_chars, int) or self.sentence_chars < 10:
            raise ConfigError(f"sentence_chars must be an int >= 10, got {self.sentence_chars!r}")
        if self.summary_role not in SUMMARY_ROLES:
            raise ConfigError(
                f"summary_role must be one of {sorted(SUMMARY_ROLES)}, got {self.summary_role!r}"
            )

    async def __call__(self, buffer: list[ChatMessage], keep_last: int) -> list[ChatMessage]:
        """Return ``[summary] + the last keep_last turns``, or a copy of ``buffer`` when it has
        at most ``keep_last`` turns after its prior summary (nothing to summarize).

        Raises:
            ValueError: ``keep_last`` is negative.
        """
        plan = plan_summary(buffer, keep_last)
        if plan is None:
            return list(buffer)
        return build_result(
            plan, self.summary_body(plan), role=self.summary_role, summarizer="extractive"
        )

    def describe(self) -> str:
        """One line for a stack's ``describe()``: ``ExtractiveSummarizer(max_chars=2000)``."""
        return f"ExtractiveSummarizer(max_chars={self.max_chars})"

    def summary_body(self, plan: SummaryPlan) -> str:
        """The new summary body: prior lines, then one line per summarized turn, bounded."""
        prior = [line for line in plan.prior_text.splitlines() if line.strip()]
        omitted = OMITTED in prior
        lines = [line for line in prior if line != OMITTED]
        prefix, turns = split_turns(plan.to_summarize)
        for segment in ([prefix] if prefix else []) + turns:
            line = self.turn_line(segment)
            if line:
                lines.append(line)
        return self._bound(lines, omitted)

    def turn_line(self, turn: Sequence[ChatMessage]) -> str:
        """One line for a turn: ``- user: … | tools: name(k=v) | assistant: …`` ("" if empty)."""
        limit = self.sentence_chars
        parts: list[str] = []
        if turn and turn[0].role == "user":
            parts.append(f"user: {first_sentence(content_text(turn[0]), limit) or '(no content)'}")
        calls = [call for m in turn if m.role == "assistant" for call in m.tool_calls]
        if calls:
            shown = [
                f"{c.name}({short_arguments(c, _ARGS_CHARS)})" for c in calls[:_MAX_CALLS_SHOWN]
            ]
            more = len(calls) - _MAX_CALLS_SHOWN
            parts.append("tools: " + "; ".join(shown) + (f"; +{more} more" if more > 0 else ""))
        for message in reversed(turn):
            if message.role == "assistant":
                answer = first_sentence(content_text(message), limit)
                if answer:
                    parts.append(f"assistant: {answer}")
                    break
        return "- " + " | ".join(parts) if parts else ""

    def _bound(self, lines: list[str], omitted: bool) -> str:
        # Drop the oldest lines until the body (with the omitted marker) fits max_chars.
        marker = len(OMITTED) + 1
        total = sum(len(line) + 1 for line in lines) - 1 + (marker if omitted else 0)
        start = 0
        while total > self.max_chars and len(lines) - start > 1:
            total -= len(lines[start]) + 1
            if not omitted:
                omitted = True
                total += marker
            start += 1
        kept = lines[start:]
        if total > self.max_chars and kept:
            room = self.max_chars - (marker if omitted else 0)
            kept[-1] = kept[-1][: room - 1].rstrip() + "…"
        return "\n".join(([OMITTED] if omitted else []) + kept)

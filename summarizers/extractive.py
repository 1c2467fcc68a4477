"""``ExtractiveSummarizer``: the default summarizer, offline, deterministic, no model call.

What an agent needs to carry on after its history is cut, kept line by line:

- ``- user: …`` every user request or question, the request itself (a greeting or an
  introduction before it is skipped: "Hi! I'm <EMAIL_ADDRESS_…>. What's the weather in
  Paris?" keeps the question);
- ``- tool: name(args) -> outcome`` each tool used, with the first words of its result;
- ``- assistant: …`` the assistant's final answer of each turn (first sentence);
- ``- facts: …`` what each PII placeholder in the summarized part stands for
  (``email address <EMAIL_ADDRESS_3f9a2c1d>``): the value stays a placeholder, the fact that
  the user gave one is kept.

When the body exceeds ``max_chars``, tool lines go first, then assistant lines, oldest first;
user requests and facts go last (an ``earlier turns omitted`` line says something was cut).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
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
    shorten,
)

__all__ = ["SUMMARY_ROLES", "ExtractiveSummarizer", "request_text"]

SUMMARY_ROLES: Final = frozenset({"system", "user", "assistant"})
OMITTED: Final = "- … (earlier turns omitted)"
FACTS: Final = "- facts: "
_ARGS_CHARS: Final = 60
_OUTCOME_CHARS: Final = 80
_MIN_REQUEST_CHARS: Final = 40

# The scrubber's placeholder shape (storage.pii.placeholders.PLACEHOLDER_RE); not imported so
# the default summarizer does not load the PII package.
_PLACEHOLDER: Final = re.compile(r"<([A-Z][A-Z0-9_]{0,63})_[0-9a-f]{8}>")
# A sentence ends at . ! or ? followed by white space (so "parser.py" is one word), or a line.
_SENTENCE_END: Final = re.compile(r"(?<=[.!?])\s+|\s*\n\s*")
_GREETING: Final = re.compile(
    r"^\W*(hi|hello|hey|hiya|howdy|greetings|good (morning|afternoon|evening|day)|"
    r"thanks?( you)?( so much| very much)?|thank you|ok(ay)?|sure|great|perfect|yes|no)\b"
    r"[\s,!.\w]{0,20}$",
    re.IGNORECASE,
)
_INTRODUCTION: Final = re.compile(
    r"^\W*(i'?m|i am|my name is|this is|my (user ?id|email|e-mail|phone|number|id)( is)?|"
    r"here is my|you can reach me)\b",
    re.IGNORECASE,
)
_REQUEST: Final = re.compile(
    r"\b(can|could|would|will) you\b|\bplease\b|\bi('d| would) like\b|\bi (want|need|wish)\b|"
    r"\bhelp me\b|\bhow (do|can|to)\b|^\W*(what|why|where|when|which|who|how|is|are|do|does|"
    r"book|cancel|change|find|show|tell|give|send|update|fix|add|remove|check|get|make)\b",
    re.IGNORECASE,
)
# Priority of a body line when the budget forces cuts: lower goes first.
_TOOL, _ASSISTANT, _USER = 0, 1, 2


def request_text(text: str, limit: int) -> str:
    """The request in a user message: its questions and requests, not its greeting or the
    introduction before it, whitespace collapsed, at most ``limit`` characters.

    Falls back to the first sentence that is neither a greeting nor an introduction, then to
    the opening sentences (:func:`summarizers.render.first_sentence`).
    """
    sentences = [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]
    if not sentences:
        return ""
    plain = [s for s in sentences if not _GREETING.match(s) and not _INTRODUCTION.match(s)]
    picked = [s for s in plain if s.endswith("?") or _REQUEST.search(s)]
    if not picked:
        if not plain:
            return first_sentence(text, limit)
        # No explicit request: the opening sentences after the greeting, like first_sentence.
        for sentence in plain:
            if picked and len(" ".join(picked)) >= _MIN_REQUEST_CHARS:
                break
            picked.append(sentence)
    return shorten(" ".join(picked), limit)


@attrs.frozen(kw_only=True)
class ExtractiveSummarizer:
    """Summarize by extraction: requests, tool outcomes, answers and facts; no model.

    The output depends only on the input (the summary message's ``id`` included). The
    conversation's leading system prompt is kept verbatim ahead of the body and not counted in
    ``max_chars``; the prior summary's lines come first.

    Args:
        max_chars: bound on the summary body in characters (>= 100); default 2000.
        sentence_chars: bound on each extracted request or answer in characters (>= 10);
            default 160.
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
        """The new summary body: prior lines, then the lines of the summarized turns, then the
        facts line, bounded by ``max_chars``."""
        prior = [line for line in plan.prior_text.splitlines() if line.strip()]
        omitted = OMITTED in prior
        facts = _merge_facts([line for line in prior if line.startswith(FACTS)], plan.to_summarize)
        lines = [
            (_priority(line), line)
            for line in prior
            if line != OMITTED and not line.startswith(FACTS)
        ]
        prefix, turns = split_turns(plan.to_summarize)
        for segment in ([prefix] if prefix else []) + turns:
            lines.extend(self.turn_lines(segment))
        return self._bound(lines, facts, omitted)

    def turn_lines(self, turn: Sequence[ChatMessage]) -> list[tuple[int, str]]:
        """The prioritised lines of one turn: its request, each tool with its outcome, the
        final answer."""
        limit = self.sentence_chars
        out: list[tuple[int, str]] = []
        if turn and turn[0].role == "user":
            request = request_text(content_text(turn[0]), limit) or "(no content)"
            out.append((_USER, f"- user: {request}"))
        results = {m.tool_call_id: m for m in turn if m.role == "tool"}
        for message in turn:
            for call in message.tool_calls:
                result = results.get(call.id)
                outcome = (
                    shorten(content_text(result), _OUTCOME_CHARS) if result is not None else ""
                )
                line = f"- tool: {call.name}({short_arguments(call, _ARGS_CHARS)})"
                out.append((_TOOL, f"{line} -> {outcome or '(no result)'}"))
        for message in reversed(turn):
            if message.role == "assistant":
                answer = first_sentence(content_text(message), limit)
                if answer:
                    out.append((_ASSISTANT, f"- assistant: {answer}"))
                    break
        return out

    def _bound(self, lines: list[tuple[int, str]], facts: list[str], omitted: bool) -> str:
        # Cut the lowest-priority lines, oldest first, until the body fits max_chars.
        marker = len(OMITTED) + 1
        size = sum(len(line) + 1 for line in facts)
        total = sum(len(line) + 1 for _, line in lines) + size - 1 + (marker if omitted else 0)
        dropped: set[int] = set()
        for level in (_TOOL, _ASSISTANT, _USER):
            for index, (priority, line) in enumerate(lines):
                if total <= self.max_chars:
                    break
                if priority != level or len(lines) - len(dropped) <= 1:
                    continue
                dropped.add(index)
                total -= len(line) + 1
                if not omitted:
                    omitted = True
                    total += marker
        kept = [line for index, (_, line) in enumerate(lines) if index not in dropped] + facts
        body = "\n".join(([OMITTED] if omitted else []) + kept)
        if len(body) > self.max_chars:
            body = body[: self.max_chars - 1].rstrip() + "…"
        return body


def _priority(line: str) -> int:
    if line.startswith("- user:"):
        return _USER
    if line.startswith("- assistant:"):
        return _ASSISTANT
    return _TOOL


def _merge_facts(prior: list[str], messages: Iterable[ChatMessage]) -> list[str]:
    """One ``- facts:`` line: the prior facts, then each new placeholder by first appearance."""
    entries: list[str] = []
    for line in prior:
        entries.extend(e for e in line.removeprefix(FACTS).split("; ") if e)
    seen = {entry.rsplit(" ", 1)[-1] for entry in entries}
    for message in messages:
        text = content_text(message) + "".join(c.arguments for c in message.tool_calls)
        for match in _PLACEHOLDER.finditer(text):
            if match.group(0) not in seen:
                seen.add(match.group(0))
                label = match.group(1).lower().replace("_", " ")
                who = "the user's" if message.role == "user" else "a"
                entries.append(f"{who} {label} {match.group(0)}")
    return [FACTS + "; ".join(entries)] if entries else []

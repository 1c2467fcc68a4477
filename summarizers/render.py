"""What every ready summarizer shares: which messages to summarize, how to render them, the result.

A buffer is ``[prior summary?] + [system prompt?] + messages``. :func:`plan_summary` splits it
into the prior summary's text, the messages not yet summarized, and the last ``keep_last`` turns
kept verbatim. :func:`build_result` makes the new buffer ``[summary] + kept turns``.

The conversation's leading system prompt (the agent's instructions) is never summarized: it is
kept verbatim at the head of the summary text, and the summary's metadata records its length
(``system_chars``) so the next round can split it off again. Only the summary's body is
rewritten round after round. The metadata also grounds the summary (``sources``): the ids of
the messages it covers, all rounds, and the message each fact it states came from.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from storage.history import last_turns_start, split_turns
from storage.message import ChatMessage, ToolCall

__all__ = [
    "SENTENCE_END",
    "SUMMARY_HEADING",
    "SummaryPlan",
    "build_result",
    "content_text",
    "first_sentence",
    "parse_summary",
    "plan_summary",
    "prior_facts",
    "render_message",
    "source_text",
    "shorten",
    "short_arguments",
]

SUMMARY_HEADING: Final = "Summary of the earlier conversation:"
"""The line older summaries opened their body with; still removed when a prior summary is
parsed. The summarizing layer frames every summary in a view (``FRAME`` of
:mod:`storage.layers.summarizing.header`), so a body no longer repeats it."""
_SEPARATOR: Final = "\n\n"
_ELLIPSIS: Final = "…"
# A sentence ends at . ! or ? followed by white space (so "parser.py" is one word), or a line.
SENTENCE_END: Final = re.compile(r"(?<=[.!?])\s+|\s*\n\s*")


@attrs.frozen
class SummaryPlan:
    """What one summarizing round works on.

    Attributes:
        system_prompt: the conversation's leading system prompt, kept verbatim ("" if none).
        prior_text: the prior summary's body (without system prompt and heading; "" if none).
        prior_count: how many raw messages the prior summary already covers.
        to_summarize: the messages not yet summarized, outside the kept turns (never empty).
        kept: the last ``keep_last`` turns, verbatim (the same message objects).
        prior_meta: the prior summary's ``metadata["chatlayers"]`` (empty if none).
        prior_id: the prior summary's message id ("" if none).
    """

    system_prompt: str
    prior_text: str
    prior_count: int
    to_summarize: tuple[ChatMessage, ...]
    kept: tuple[ChatMessage, ...]
    prior_meta: Mapping[str, Any] = attrs.field(factory=dict)
    prior_id: str = ""


def plan_summary(buffer: Sequence[ChatMessage], keep_last: int) -> SummaryPlan | None:
    """Split ``buffer`` for a summarizing round; ``None`` when there is nothing to summarize.

    Only the prior summary (the first message, if ``is_summary``) and the messages after it
    that are not in the last ``keep_last`` turns are summarized. There is nothing to summarize
    when the history after the prior summary has at most ``keep_last`` turns (with
    ``keep_last=0``: when it is empty).

    Raises:
        ValueError: ``keep_last`` is negative.
    """
    if keep_last < 0:
        raise ValueError(f"keep_last must be >= 0, got {keep_last}")
    system_prompt = prior_text = ""
    prior_count = 0
    prior_meta: Mapping[str, Any] = {}
    prior_id = ""
    rest = list(buffer)
    if rest and rest[0].is_summary:
        system_prompt, prior_text, prior_count = parse_summary(rest[0])
        marker = rest[0].metadata.get("chatlayers")
        prior_meta = marker if isinstance(marker, Mapping) else {}
        prior_id = rest[0].id
        rest = rest[1:]
    elif rest and rest[0].role == "system":
        system_prompt = content_text(rest[0])
        rest = rest[1:]
    prefix, turns = split_turns(rest)
    # keep_last=0 summarizes everything, also a run of tool groups with no user message (the
    # summarizing layer compressing the older groups of one long agent turn).
    if len(turns) <= keep_last and not (keep_last == 0 and prefix):
        return None
    start = last_turns_start(rest, keep_last)
    return SummaryPlan(
        system_prompt,
        prior_text,
        prior_count,
        tuple(rest[:start]),
        tuple(rest[start:]),
        prior_meta,
        prior_id,
    )


def parse_summary(summary: ChatMessage) -> tuple[str, str, int]:
    """``(system prompt, body, messages covered)`` of a summary message, made by us or anyone
    else: the prompt split off by ``metadata["chatlayers"]["system_chars"]``, the body without
    an older summary's :data:`SUMMARY_HEADING`, the count from ``summarized`` (0 if absent)."""
    marker = summary.metadata.get("chatlayers")
    meta: Mapping[str, Any] = marker if isinstance(marker, Mapping) else {}
    text = content_text(summary)
    system_chars = meta.get("system_chars")
    system_prompt = ""
    if isinstance(system_chars, int) and 0 < system_chars <= len(text):
        system_prompt, text = text[:system_chars], text[system_chars:].removeprefix(_SEPARATOR)
    text = text.removeprefix(SUMMARY_HEADING).strip("\n")
    count = meta.get("summarized")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        count = 0
    return system_prompt, text, count


def build_result(
    plan: SummaryPlan,
    body: str,
    *,
    role: str,
    summarizer: str,
    extra: Mapping[str, Any] | None = None,
    facts: Mapping[str, str] | None = None,
) -> list[ChatMessage]:
    """The new buffer: one summary message, then the kept turns verbatim.

    The summary's text is the system prompt (if any), then ``body`` (the view frames it as
    a summary). Its metadata ``{"chatlayers": {...}}`` holds ``summary: True``,
    ``summarizer`` (its name), ``summarized`` (raw messages covered, all rounds), ``last_id``
    (id of the newest summarized message), ``system_chars`` (length of the kept system
    prompt, when there is one),
    ``sources`` and ``extra``. ``sources`` grounds the summary: ``covers``, the ids of the
    messages it covers (all rounds, oldest first: the prior summary's, then this round's), and
    ``facts``, each fact the body states mapped to the id of the message it came from (given
    by the summarizer; metadata only, never in the text). Its ``created_at`` is the newest
    summarized message's, and its ``id`` is derived from what it covers and says, so equal
    inputs give equal results.
    """
    head = plan.system_prompt + _SEPARATOR if plan.system_prompt else ""
    text = f"{head}{body}"
    last = plan.to_summarize[-1]
    meta: dict[str, Any] = {
        "summary": True,
        "summarizer": summarizer,
        "summarized": plan.prior_count + len(plan.to_summarize),
        "last_id": last.id,
    }
    if plan.system_prompt:
        meta["system_chars"] = len(plan.system_prompt)
    meta["sources"] = {
        "covers": [*_prior_covers(plan.prior_meta), *(m.id for m in plan.to_summarize)],
        "facts": dict(facts or {}),
    }
    if extra:
        meta.update(extra)
    digest = hashlib.sha256(
        f"{summarizer}\x00{last.id}\x00{text}".encode("utf-8", "surrogatepass")
    ).hexdigest()
    summary = ChatMessage(
        role, text, id=digest[:32], metadata={"chatlayers": meta}, created_at=last.created_at
    )
    return [summary, *plan.kept]


def prior_facts(meta: Mapping[str, Any]) -> dict[str, str]:
    """The ``sources.facts`` of a prior summary's metadata (fact → message id), or ``{}``."""
    sources = meta.get("sources")
    facts = sources.get("facts") if isinstance(sources, Mapping) else None
    if not isinstance(facts, Mapping):
        return {}
    return {str(k): v for k, v in facts.items() if isinstance(v, str)}


def source_text(message: ChatMessage) -> str:
    """The text of ``message`` facts can come from: its content, then each tool call's name
    and arguments."""
    calls = " ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
    return f"{content_text(message)} {calls}" if calls else content_text(message)


def _prior_covers(meta: Mapping[str, Any]) -> list[str]:
    sources = meta.get("sources")
    covers = sources.get("covers") if isinstance(sources, Mapping) else None
    if isinstance(covers, list | tuple):
        return [c for c in covers if isinstance(c, str)]
    return []


def content_text(message: ChatMessage) -> str:
    """The content as text: the string, the parts' text (``[type]`` for other parts), or ""."""
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    pieces: list[str] = []
    for part in content:
        if isinstance(part, Mapping):
            text = part.get("text")
            if isinstance(text, str):
                pieces.append(text)
            else:
                pieces.append(f"[{part.get('type', 'part')}]")
    return "\n".join(pieces)


def render_message(message: ChatMessage, *, text: str | None = None) -> str:
    """One message as transcript text for a summarizing prompt.

    Tool calls are rendered as ``name(arguments)`` with the arguments string exactly as the
    model produced it; ``None`` content renders as ``(no content)``. ``text`` replaces the
    content (a summarizer passes a shortened one).
    """
    body = content_text(message) if text is None else text
    role = message.role
    who = role.capitalize()
    if message.name and role in ("user", "assistant", "system"):
        who = f"{who} ({message.name})"
    if role == "tool":
        label = message.name or f"call {message.tool_call_id}"
        return f"Tool result of {label}: {body or '(no content)'}"
    lines = [f"{who}: {body}"] if body else []
    lines.extend(f"{who} called {call.name}({call.arguments})" for call in message.tool_calls)
    return "\n".join(lines) or f"{who}: (no content)"


def shorten(text: str, limit: int) -> str:
    """``text`` with whitespace runs collapsed, cut to at most ``limit`` characters (``…``)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)].rstrip() + _ELLIPSIS


def first_sentence(text: str, limit: int, *, min_chars: int = 40) -> str:
    """The opening sentence (or line) of ``text``, whitespace collapsed, at most ``limit`` chars.

    Sentences are added while the result is shorter than ``min_chars``, so a bare "Hi!" is
    followed by what the message is about.
    """
    sentences = [piece for piece in SENTENCE_END.split(text.strip()) if piece]
    if not sentences:
        return ""
    picked = sentences[0]
    for sentence in sentences[1:]:
        if len(picked) >= min_chars:
            break
        picked = f"{picked} {sentence}"
    return shorten(picked, limit)


def short_arguments(call: ToolCall, limit: int) -> str:
    """A tool call's arguments for a one-line summary: ``k=v, ...`` at most ``limit`` characters.

    JSON objects become ``key=value`` pairs (strings unquoted); anything else (including
    arguments that are not valid JSON) is shown as the raw string.
    """
    try:
        parsed = json.loads(call.arguments)
    except (ValueError, RecursionError):
        parsed = None
    if isinstance(parsed, dict):
        pairs = (
            f"{k}={v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
            for k, v in parsed.items()
        )
        return shorten(", ".join(pairs), limit)
    return shorten(call.arguments, limit)

"""The no-model steps of a compaction: old tool results cleared or trimmed in the view only.

Before a summarizer is called, a compaction tries these steps, in order (:func:`lighten`),
each on the tool results older than the last ``keep_turns`` turns:

1. ``"clear"`` (:func:`clear_known_results`): a result the summary already holds becomes
   :data:`CLEARED`. It holds it when the summary's text states every fact of the result
   (:func:`storage.facts.extract_facts`; at least one) and every word of what the result says
   (the values of a JSON result, all the text of another), so a result whose status changed
   (``"cancelled"`` where the summary says ``active``) is never cleared;
2. ``"collapse"`` (:func:`collapse_repeated_reads`): a result of a call made again later in
   the view (the same tool, the same arguments, JSON compared by value) becomes
   :data:`COLLAPSED` when each of its facts is in the newest result or the summary (an
   older price is never lost); the newest result stays as it is;
3. ``"trim"`` (:mod:`.trimming`, when ``trim_tool_results`` is set): a long result is cut to
   head and tail.

A cleared result keeps its id, role, ``tool_call_id`` and ``name`` (its call stays answered,
the pair intact); its content is the marker, and its metadata records
``metadata["chatlayers"]["cleared"]`` (``"summary"`` or ``"repeated"``, with ``"newer"``: the
id of the result kept) and ``trimmed_chars`` (the characters it no longer shows), so a release
that only knows trimming counts it by its new text and never trims it again. Results cleared
already are left as they are, so the steps are idempotent, and deterministic: every instance
makes the same view from the same stored data. The raw record keeps every character.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from storage.facts import extract_facts
from storage.history import last_turns_start
from storage.layers.summarizing.trimming import trim_tool_results
from storage.message import ChatMessage, ToolCall, thaw

__all__ = [
    "CLEARED",
    "COLLAPSED",
    "STEPS",
    "Stage",
    "Step",
    "clear_known_results",
    "cleared_reason",
    "collapse_repeated_reads",
    "lighten",
    "needs_originals",
    "still_held",
]

Step = Literal["clear", "collapse", "trim"]
STEPS: Final[tuple[Step, ...]] = ("clear", "collapse", "trim")
"""The no-model steps, in the order a compaction tries them."""

CLEARED: Final = "[tool result cleared by chatlayers: its facts are in the summary]"
"""The content of a result the summary already holds."""

COLLAPSED: Final = (
    "[tool result cleared by chatlayers: the same call was made again later; "
    "its newest result is kept]"
)
"""The content of an older result of a call repeated later."""

_WORD: Final = re.compile(r"[^\W_]+")


def cleared_reason(message: ChatMessage) -> str | None:
    """Why ``message`` was cleared (``"summary"``, ``"repeated"``), ``None`` when it was not."""
    marker = message.metadata.get("chatlayers")
    reason = marker.get("cleared") if isinstance(marker, Mapping) else None
    return reason if isinstance(reason, str) else None


def _text_of(message: ChatMessage) -> str | None:
    """The text of a tool result whose content is all text (``None``: it has other parts)."""
    content = message.content
    if isinstance(content, str):
        return content
    if isinstance(content, tuple) and all(
        isinstance(part, Mapping) and part.get("type") == "text" for part in content
    ):
        return message.text
    return None


def _cleared(message: ChatMessage, marker: str, shown: int, **why: str) -> ChatMessage:
    meta = thaw(message.metadata)
    own = meta.get("chatlayers")
    own = own if isinstance(own, dict) else {}
    previously = own.get("trimmed_chars")
    cut = shown + (previously if type(previously) is int else 0)
    meta["chatlayers"] = {**own, "cleared": why.pop("reason"), **why, "trimmed_chars": cut}
    return attrs.evolve(message, content=marker, metadata=meta)


def _words(value: Any, out: set[str]) -> None:
    """The words of a decoded JSON value's leaves (keys left out: a summary names them its
    own way; booleans and nulls too)."""
    if isinstance(value, Mapping):
        for item in value.values():
            _words(item, out)
    elif isinstance(value, list):
        for item in value:
            _words(item, out)
    elif isinstance(value, bool) or value is None:
        return
    else:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        out.update(w.lower() for w in _WORD.findall(str(value)))


def _said(text: str) -> set[str]:
    """The words ``text`` says: its JSON values' when it is a JSON document, else its own."""
    stripped = text.strip()
    if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
        try:
            document = json.loads(stripped)
        except (ValueError, RecursionError):
            pass
        else:
            words: set[str] = set()
            _words(document, words)
            return words
    return {w.lower() for w in _WORD.findall(text)}


def clear_known_results(
    messages: Sequence[ChatMessage], summary: Iterable[ChatMessage], *, keep_turns: int
) -> list[ChatMessage]:
    """``messages`` with each tool result older than the last ``keep_turns`` turns that
    ``summary`` (the summary messages the view starts with) already holds replaced by
    :data:`CLEARED` (module docstring). Unchanged messages are the same objects."""
    out = list(messages)
    text = "\n".join(m.text for m in summary)
    if not text:
        return out
    facts = extract_facts(text)
    words = {w.lower() for w in _WORD.findall(text)}
    for index in range(last_turns_start(out, keep_turns)):
        message = out[index]
        if message.role != "tool" or cleared_reason(message) is not None:
            continue
        result = _text_of(message)
        if not result:
            continue
        if _held(result, facts, words):
            out[index] = _cleared(message, CLEARED, len(result), reason="summary")
    return out


def _held(result: str, facts: frozenset[str], words: set[str]) -> bool:
    """A summary stating ``facts`` in ``words`` holds all that ``result`` says."""
    own = extract_facts(result)
    return bool(own) and own <= facts and _said(result) <= words


def needs_originals(messages: Iterable[ChatMessage]) -> bool:
    """``messages`` hold a result cleared or collapsed by an earlier compaction, whose text
    :func:`still_held` needs from the raw record once a new summary is made."""
    return any(cleared_reason(m) in ("summary", "repeated") for m in messages)


def still_held(
    messages: Sequence[ChatMessage],
    originals: Mapping[str, ChatMessage],
    summary: Iterable[ChatMessage],
    later: Sequence[ChatMessage] = (),
) -> list[ChatMessage]:
    """``messages`` (what a new summary keeps after it) with each result cleared or collapsed
    against the previous summary put back as it was (``originals``: by id, before the steps)
    when ``summary`` (the new one) and, for a collapsed result, its newest result no longer
    state all it stated: a summary rewrites its ledger to the newest state. ``later``: the
    messages of the view after ``messages``. Unchanged messages are the same objects."""
    out = list(messages)
    text: str | None = None
    for index, message in enumerate(out):
        reason = cleared_reason(message)
        original = originals.get(message.id)
        if reason not in ("summary", "repeated") or original is None or original is message:
            continue
        if text is None:
            text = "\n".join(m.text for m in summary)
            facts = extract_facts(text)
            words = {w.lower() for w in _WORD.findall(text)}
        said = _text_of(original) or original.text
        if reason == "summary":
            held = _held(said, facts, words)
        else:
            newer = message.metadata["chatlayers"].get("newer")
            kept = next((m for m in (*out, *later) if m.id == newer and m.role == "tool"), None)
            held = kept is not None and extract_facts(said) <= extract_facts(kept.text) | facts
        if not held:
            out[index] = original
    return out


def _call_key(call: ToolCall) -> tuple[str, str]:
    """A call's tool and arguments, JSON arguments compared by value."""
    try:
        arguments = json.dumps(json.loads(call.arguments), sort_keys=True)
    except (ValueError, RecursionError):
        arguments = call.arguments.strip()
    return call.name, arguments


def collapse_repeated_reads(
    messages: Sequence[ChatMessage], summary: Iterable[ChatMessage] = (), *, keep_turns: int
) -> list[ChatMessage]:
    """``messages`` with each tool result older than the last ``keep_turns`` turns whose call
    is made again later (the same tool and arguments) replaced by :data:`COLLAPSED`, when
    every fact it states is in the newest result of that call or in ``summary`` (the summary
    messages the view starts with); the newest result of each call stays. Unchanged messages
    are the same objects."""
    out = list(messages)
    known: frozenset[str] | None = None  # the summary's facts, read when first needed
    calls: dict[str, ToolCall] = {}  # the open calls by id (a reused id means the newest)
    keys: list[tuple[str, str] | None] = []
    for message in out:
        for call in message.tool_calls:
            calls[call.id] = call
        found = calls.get(message.tool_call_id or "") if message.role == "tool" else None
        keys.append(_call_key(found) if found is not None else None)
    newest: dict[tuple[str, str], int] = {}
    for index, key in enumerate(keys):
        if key is not None:
            newest[key] = index
    for index in range(last_turns_start(out, keep_turns)):
        key = keys[index]
        message = out[index]
        if key is None or newest[key] == index or cleared_reason(message) is not None:
            continue
        text = _text_of(message) or message.text
        kept = out[newest[key]]
        if known is None:
            known = extract_facts("\n".join(m.text for m in summary))
        if not extract_facts(text) <= extract_facts(kept.text) | known:
            continue  # it says something the newest result does not: kept
        out[index] = _cleared(message, COLLAPSED, len(text), reason="repeated", newer=kept.id)
    return out


@attrs.frozen
class Stage:
    """The view's messages after one step that changed something.

    Attributes:
        step: the step.
        items: the messages after it (and after the steps before it).
        end: ``items[:end]`` hold every message changed so far (a boundary that does not
            split a call from its results).
    """

    step: Step
    items: tuple[ChatMessage, ...]
    end: int


def lighten(
    summary: Sequence[ChatMessage],
    items: Sequence[ChatMessage],
    *,
    keep_turns: int,
    clear: bool,
    trim_chars: int | None,
) -> list[Stage]:
    """The steps (module docstring) applied in turn to ``items`` (a view's messages after its
    leading prompt and its ``summary`` messages): one :class:`Stage` per step that changed
    something, in order (empty: nothing to change).

    Args:
        summary: the summary messages the view starts with (what clearing compares with).
        items: the messages after them, oldest first.
        keep_turns: the last turns no step changes.
        clear: run clearing and collapsing.
        trim_chars: trim results longer than this (``None``: no trimming).
    """
    stages: list[Stage] = []
    current = list(items)
    end = 0
    steps: list[tuple[Step, list[ChatMessage]]] = []
    if clear:
        steps.append(("clear", clear_known_results(current, summary, keep_turns=keep_turns)))
        cleared = steps[-1][1]
        steps.append(("collapse", collapse_repeated_reads(cleared, summary, keep_turns=keep_turns)))
    if trim_chars is not None:
        before = steps[-1][1] if steps else current
        steps.append(
            ("trim", trim_tool_results(before, keep_turns=keep_turns, max_chars=trim_chars))
        )
    for step, after in steps:
        changed = [i for i, (a, b) in enumerate(zip(current, after, strict=True)) if a is not b]
        current = after
        if not changed:
            continue
        end = max(end, changed[-1] + 1)
        while end < len(current) and current[end].role == "tool":
            end += 1  # the call's other results go with it
        stages.append(Stage(step, tuple(current), end))
    return stages

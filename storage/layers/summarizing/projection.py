"""The view as a projection of the record: summary messages, the split of a summarizer's
result into checkpoint + raw tail, and the windows a view is served through.

A summarizer returns a new buffer: summary message(s) then the last turns verbatim. The
verbatim end is raw record (it is the end of what the summarizer was given), so a result is
stored as a checkpoint holding only the summary part and the raw position it covers up to; the
view is rebuilt from the checkpoint and the raw messages after that position.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

import attrs

from storage.errors import ChatStorageError, InvalidMessageError, SummarizerError
from storage.history import check_tool_pairs, last_turns_start, turn_window, validate_message
from storage.message import INSTRUCTION_ROLES, ChatMessage

__all__ = [
    "check_result",
    "damaged_start",
    "leading_summaries",
    "mark_summary",
    "open_calls",
    "orphaned_results",
    "serve",
    "split_result",
    "start_right",
    "summary_message",
    "without_orphans",
]


def leading_summaries(messages: Sequence[ChatMessage]) -> int:
    """How many messages at the start of ``messages`` are marked as summaries."""
    n = 0
    for message in messages:
        if not message.is_summary:
            break
        n += 1
    return n


def mark_summary(message: ChatMessage, created_at: datetime) -> ChatMessage:
    """``message`` marked as a summary (``metadata["chatlayers"]["summary"] = True``), with
    ``created_at`` set when it has none. A checkpoint holds only marked messages."""
    if not message.is_summary:
        marker = message.metadata.get("chatlayers")
        own = dict(marker) if isinstance(marker, Mapping) else {}
        metadata = {**message.metadata, "chatlayers": {**own, "summary": True}}
        message = attrs.evolve(message, metadata=metadata)
    if message.created_at is None:
        message = attrs.evolve(message, created_at=created_at)
    return message


def summary_message(summary: str | ChatMessage, role: str, now: datetime) -> ChatMessage:
    """The summary message ``compact(key, summary=...)`` installs.

    Args:
        summary: the summary text, or a message (marked as a summary if it is not).
        role: the role of a message made from text.
        now: its ``created_at`` when it has none (UTC).

    Raises:
        InvalidMessageError: empty text, a tool call or result, or an invalid message.
    """
    if isinstance(summary, str):
        if not summary.strip():
            raise InvalidMessageError("a summary must hold some text")
        message = ChatMessage(role, summary, metadata={"chatlayers": {"summary": True}})
    elif isinstance(summary, ChatMessage):
        message = summary
        if message.tool_calls or message.role == "tool":
            raise InvalidMessageError("a summary cannot be a tool call or a tool result")
    else:
        raise InvalidMessageError(
            f"summary must be a str or a ChatMessage, got {type(summary).__name__}"
        )
    return mark_summary(validate_message(message), now)


def check_result(result: object, source: Sequence[ChatMessage], keep_last: int) -> None:
    """Rule 7: refuse a result that breaks the summary rules.

    Raises:
        SummarizerError: not a list; an invalid message or an orphaned tool result; the last
            ``keep_last`` turns of ``source`` (after its leading summary) not kept verbatim.
    """
    if not isinstance(result, list):
        raise SummarizerError(f"summarizer must return a list, got {type(result).__name__}")
    try:
        for index, message in enumerate(result):
            validate_message(message, index)
        check_tool_pairs(result)
    except ChatStorageError as exc:
        raise SummarizerError(f"summarizer returned an invalid history: {exc}") from exc
    # A leading prior summary is not a turn, whatever its role.
    body = source[leading_summaries(source[:1]) :]
    kept = list(body[last_turns_start(body, keep_last) :])
    if kept and result[-len(kept) :] != kept:
        raise SummarizerError(
            f"summarizer result does not end with the last {keep_last} turns verbatim "
            f"({len(kept)} messages)"
        )


def split_result(
    result: Sequence[ChatMessage], tail: Sequence[ChatMessage]
) -> tuple[list[ChatMessage], int]:
    """Split a summarizer result into its summary part and the raw tail it keeps.

    Args:
        result: what the summarizer returned (checked by :func:`check_result`).
        tail: the raw messages the summarizer was given after the prior summary.

    Returns:
        ``(summary, covered)``: the messages before the longest end of ``result`` that is an
        end of ``tail`` (the kept raw messages), and how many messages at the start of
        ``tail`` the summary covers (``0``: the result summarized nothing).
    """
    kept = 0
    limit = min(len(result), len(tail))
    while kept < limit and result[-1 - kept] == tail[-1 - kept]:
        kept += 1
    return list(result[: len(result) - kept]), len(tail) - kept


def serve(view: list[ChatMessage], limit: int | None, window: int | None) -> list[ChatMessage]:
    """What ``fetch`` returns from a view (a new list): the newest ``window`` messages first
    when given (the fallback of a view with no summary), then ``limit``, each by
    :func:`~storage.history.turn_window` (the leading message kept, a turn or group boundary
    first), then :func:`start_right`."""
    if window is not None:
        view = turn_window(view, window)
    if limit is not None:
        view = turn_window(view, limit)
    return start_right(view)


def damaged_start(view: Sequence[ChatMessage]) -> tuple[int, int]:
    """``(lead, start)``: ``view[lead:start]`` is a damaged start to leave out of the view
    (empty when it starts right). When the first message after the leading system/developer
    message (and any summary after it) is a ``tool`` result, its call is not in the record (a
    retention purge removed the oldest messages mid-turn), so the view starts at the next user
    message (past the orphaned results when there is none). A view starting with an assistant
    message (an agent that began on its own, a greeting) starts right."""
    lead = 1 if view and view[0].role in INSTRUCTION_ROLES else 0
    if len(view) <= lead or view[lead].role != "tool":
        return lead, lead
    for index in range(lead + 1, len(view)):
        if view[index].role == "user":
            return lead, index
    start = lead
    while start < len(view) and view[start].role == "tool":
        start += 1
    return lead, start


def start_right(view: list[ChatMessage]) -> list[ChatMessage]:
    """``view`` (a new list) without its damaged start (:func:`damaged_start`); one role
    check when the view starts right."""
    lead, start = damaged_start(view)
    if start == lead:
        return list(view)
    return [*view[:lead], *view[start:]]


def open_calls(messages: Sequence[ChatMessage], end: int | None = None) -> set[str]:
    """The ids of the calls a tool result right after ``messages[:end]`` may answer: those of
    the assistant message ending them (or ending them but for its results), not answered yet
    (empty: none). Reads back only over that last group."""
    answered: set[str | None] = set()
    for index in range(len(messages) if end is None else end, 0, -1):
        index -= 1
        message = messages[index]
        if message.role == "tool":
            answered.add(message.tool_call_id)
            continue
        if message.role == "assistant" and message.tool_calls:
            return {call.id for call in message.tool_calls if call.id not in answered}
        break
    return set()


def orphaned_results(
    messages: Sequence[ChatMessage], before: Sequence[ChatMessage] = (), end: int | None = None
) -> list[int]:
    """The indexes of the tool results of ``messages`` (following ``before[:end]``) that
    answer no call: a result belongs right after the assistant message holding its call,
    among that message's other results, once. Empty (the usual case) without a copy."""
    found: list[int] = []
    calls: set[str] | None = None  # what the next result may answer; from ``before`` lazily
    for index, message in enumerate(messages):
        role = message.role
        if role == "tool":
            if calls is None:
                calls = open_calls(before, end)
            answers = message.tool_call_id
            if answers is not None and answers in calls:
                calls.discard(answers)
            else:
                found.append(index)
        elif role == "assistant" and message.tool_calls:
            calls = {call.id for call in message.tool_calls}
        else:
            calls = set()
    return found


def without_orphans(messages: list[ChatMessage]) -> list[ChatMessage]:
    """``messages`` (a raw history, leading summary or prompt included) without the tool results
    :func:`orphaned_results` finds; ``messages`` itself when there are none."""
    found = orphaned_results(messages)
    if not found:
        return messages
    drop = set(found)
    return [m for i, m in enumerate(messages) if i not in drop]

"""What a model would get without a summary, at the same size: the baselines of the measure.

- **truncation**: the system prompt plus the newest whole messages that fit in a number of
  characters (the view's);
- **keep-last-N**: the system prompt plus the newest messages, as many messages in all as
  the view holds.

Both are tool-pair safe like every served window (a leading tool result whose call was cut
off is dropped: a client would refuse it), so they may hold a little less than their budget.
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.history import safe_window
from storage.message import ChatMessage

__all__ = ["keep_last_messages", "message_chars", "message_pieces", "truncate_to_chars"]

_PROMPT_ROLES = ("system", "developer")


def message_pieces(message: ChatMessage) -> list[str]:
    """The texts of ``message`` a model reads: its content text, then each tool call's
    arguments (tool-call names are not facts)."""
    pieces = [message.text] if message.text else []
    pieces.extend(call.arguments for call in message.tool_calls)
    return pieces


def message_chars(message: ChatMessage) -> int:
    """Characters of ``message`` a model reads: content text, tool-call names and arguments."""
    return len(message.text) + sum(len(c.name) + len(c.arguments) for c in message.tool_calls)


def _split_prompt(record: Sequence[ChatMessage]) -> tuple[list[ChatMessage], list[ChatMessage]]:
    if record and record[0].role in _PROMPT_ROLES:
        return [record[0]], list(record[1:])
    return [], list(record)


def truncate_to_chars(record: Sequence[ChatMessage], chars: int) -> list[ChatMessage]:
    """The leading system prompt (always) plus the newest whole messages of ``record`` whose
    characters (:func:`message_chars`), with the prompt's, add up to at most ``chars``."""
    head, rest = _split_prompt(record)
    budget = chars - sum(message_chars(m) for m in head)
    start = len(rest)
    while start > 0 and message_chars(rest[start - 1]) <= budget:
        start -= 1
        budget -= message_chars(rest[start])
    return head + safe_window(rest[start:], len(rest) - start)


def keep_last_messages(record: Sequence[ChatMessage], count: int) -> list[ChatMessage]:
    """The leading system prompt (always) plus the newest messages of ``record``, ``count``
    messages in all (at least the prompt)."""
    head, rest = _split_prompt(record)
    return head + safe_window(rest, max(count - len(head), 0))

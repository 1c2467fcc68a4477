"""Which messages a retention purge deletes, so what stays is a record chat APIs accept.

A purge deletes the messages older than its cut-off, widened twice:

- **whole tool groups** (:func:`whole_tool_groups`): when any message of an assistant's tool
  calls and their results goes, the whole group goes, so the record never holds a result
  without its call or a call without its results;
- **no orphaned answers at the front** (:func:`purge_mask`): when the first message left would
  not be a user message (the answer of a question that went, an agent's work on it) and a user
  message is left after it, the messages before that user message go too, so the record (and
  every view of it) starts with a user turn after its instructions. With no user message
  left after it (one long agent turn), only the tool-group rule applies.

The cut-off only ever moves forward: nothing older than the retention period stays.
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.message import INSTRUCTION_ROLES, ChatMessage

__all__ = ["ends_tool_group", "purge_mask", "whole_tool_groups"]


def whole_tool_groups(
    messages: Sequence[ChatMessage], drop: Sequence[bool]
) -> tuple[list[bool], bool]:
    """``drop`` (which of ``messages`` a retention purge deletes) widened to whole tool groups.

    A tool group is an assistant message with tool calls and the ``tool`` results after it up
    to the next assistant message with tool calls (the pairing rule of
    :func:`check_tool_pairs`). A group goes whole when any of its messages goes, so a purge
    never leaves a result without its call nor a call without its results: the cut-off
    moves forward to the group's end, never back (nothing older than the retention period
    stays).

    Returns:
        The widened mask, and whether the last group of ``messages`` goes: its results stored
        after ``messages`` (a store that read only a prefix) must go too, up to the next
        assistant message with tool calls (:func:`ends_tool_group`).
    """
    groups: list[int] = []  # per message: index of its group's call, or -1
    current = -1
    for index, message in enumerate(messages):
        if message.role == "assistant" and message.tool_calls:
            current = index
            groups.append(index)
        elif message.role == "tool":
            groups.append(current)
        else:
            groups.append(-1)
    doomed = {group for group, gone in zip(groups, drop, strict=True) if gone and group >= 0}
    widened = [gone or group in doomed for group, gone in zip(groups, drop, strict=True)]
    return widened, current >= 0 and current in doomed


def ends_tool_group(message: ChatMessage) -> bool:
    """Whether ``message`` starts a new tool group (an assistant message with tool calls), so
    the results of the group before it end there (:func:`whole_tool_groups`)."""
    return message.role == "assistant" and bool(message.tool_calls)


def purge_mask(messages: Sequence[ChatMessage], old: Sequence[bool]) -> tuple[list[bool], bool]:
    """Which of ``messages`` (a key's record, or its first part, oldest first) a purge deletes,
    given which are ``old`` (created before the cut-off); see the module docstring.

    Returns:
        ``(mask, more)``: the messages to delete, and whether the answer depends on messages
        after ``messages``: a store that read only the first part of the record reads on,
        appends them (not old) and asks again, until ``more`` is False or the record ends
        (then ``mask`` as it is stands).
    """
    mask, open_group = whole_tool_groups(messages, old)
    if not any(mask):
        return mask, False
    pending: list[int] = []  # left messages before the first user message left
    for index, (message, gone) in enumerate(zip(messages, mask, strict=True)):
        if gone:
            continue
        if message.role == "user":
            for orphan in pending:
                mask[orphan] = True
            return mask, open_group
        if message.role not in INSTRUCTION_ROLES:
            pending.append(index)
    return mask, True  # no user message left yet: what follows decides

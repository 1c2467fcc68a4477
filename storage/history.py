"""History rules shared by every store and layer: validation, turns, tool-pair-safe windows.

The validation rules follow what chat APIs enforce on a history (and PraisonAI's ``setHistory``):
known roles, correct field types, a ``system`` (or ``developer``) message only first, and every
``tool`` result answering a call of the nearest preceding assistant turn that made calls. Real
data reuses tool-call ids across turns, so results are paired by nearest turn, never by a
global id.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, Literal

import attrs

from storage.errors import InvalidArgumentError, InvalidMessageError
from storage.message import (
    INSTRUCTION_ROLES,
    MAX_DEPTH,
    ROLES,
    ChatMessage,
    ToolCall,
    with_created_at,
)

__all__ = [
    "SystemPolicy",
    "check_tool_pairs",
    "prepare_batch",
    "drop_orphaned_results",
    "last_turns_start",
    "safe_window",
    "split_turns",
    "turn_window",
    "validate_history",
    "validate_message",
]


def _where(index: int | None) -> str:
    return f"message {index}: " if index is not None else ""


def _check_text(value: str, what: str, where: str) -> None:
    # Lone surrogates cannot be encoded as UTF-8: refuse them before anything is written.
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidMessageError(
                f"{where}{what} holds a lone surrogate at position {exc.start}, "
                "which cannot be stored as UTF-8"
            ) from None


# One node of the walk: (value, depth, parent node, key or index within the parent).
_Node = tuple[Any, int, "_Node | None", "str | int | None"]


def _path(node: _Node, root: str) -> str:
    """``root["a"][0]``: where ``node`` sits, built only when an error names it."""
    segments: list[str] = []
    current: _Node | None = node
    while current is not None and current[2] is not None:
        segment = current[3]
        segments.append(f"[{segment!r}]" if isinstance(segment, str) else f"[{segment}]")
        current = current[2]
    return root + "".join(reversed(segments))


def _check_json_like(value: Any, what: str, where: str) -> None:
    """Check JSON-like data without recursion: types, string texts and keys, and depth.

    Raises:
        InvalidMessageError: naming the path (``metadata['a'][0]``) of a non-string key, a
            value that is not JSON data, a lone surrogate, or nesting deeper than
            :data:`~storage.message.MAX_DEPTH`.
    """
    stack: list[_Node] = [(value, 1, None, None)]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        item, depth = node[0], node[1]
        if isinstance(item, str):
            if not item.isascii():
                _check_text(item, _path(node, what), where)
        elif isinstance(item, Mapping):
            if depth > MAX_DEPTH:
                raise InvalidMessageError(
                    f"{where}{_path(node, what)} nests deeper than {MAX_DEPTH} levels"
                )
            for k, v in item.items():
                if not isinstance(k, str):
                    raise InvalidMessageError(
                        f"{where}{_path(node, what)} has a non-string key {k!r}"
                    )
                if not k.isascii():
                    _check_text(k, f"a key of {_path(node, what)}", where)
                if v is None or v.__class__ in _SCALARS:
                    if v.__class__ is str and not v.isascii():
                        _check_text(v, _path((v, depth + 1, node, k), what), where)
                    elif v.__class__ is float and not math.isfinite(v):
                        _not_finite(v, _path((v, depth + 1, node, k), what), where)
                    continue
                push((v, depth + 1, node, k))
        elif isinstance(item, list | tuple):
            if depth > MAX_DEPTH:
                raise InvalidMessageError(
                    f"{where}{_path(node, what)} nests deeper than {MAX_DEPTH} levels"
                )
            for i, v in enumerate(item):
                push((v, depth + 1, node, i))
        elif isinstance(item, float) and not math.isfinite(item):
            _not_finite(item, _path(node, what), where)
        elif not (item is None or isinstance(item, bool | int | float)):
            raise InvalidMessageError(
                f"{where}{_path(node, what)} holds a {type(item).__name__}, which is not JSON data"
            )


def _not_finite(value: float, what: str, where: str) -> None:
    # JSON (RFC 8259 §6) has no NaN or Infinity: a record holding one would not be JSON.
    raise InvalidMessageError(f"{where}{what} holds {value!r}, which JSON cannot represent")


_SCALARS: Final = frozenset({str, int, float, bool})


def validate_message(message: object, index: int | None = None) -> ChatMessage:
    """Check one message's role and field types; return it with ``created_at`` in UTC.

    Args:
        message: the message to check.
        index: its position in a batch or history, named in the error.

    Returns:
        The message, with a non-UTC aware ``created_at`` converted to UTC.

    Raises:
        InvalidMessageError: not a ``ChatMessage``; unknown role; ``content`` not a str, None
            or a sequence of mappings; ``tool_calls`` on a non-assistant message or not
            ``ToolCall`` objects with string fields; a ``tool`` message without a string
            ``tool_call_id``; a naive ``created_at``; a lone surrogate in any string (content,
            parts, ``name``, ``tool_call_id``, tool calls, ``metadata``, ``extra``: the error
            names the field and path); parts, metadata or extra nested deeper than
            :data:`~storage.message.MAX_DEPTH` (64) levels.
    """
    where = _where(index)
    if not isinstance(message, ChatMessage):
        raise InvalidMessageError(f"{where}expected a ChatMessage, got {type(message).__name__}")
    role = message.role
    if role not in ROLES:
        raise InvalidMessageError(
            f"{where}unknown role {role!r} (expected one of: {', '.join(sorted(ROLES))})"
        )
    content = message.content
    if isinstance(content, str):
        _check_text(content, "content", where)
    elif isinstance(content, tuple):
        for n, part in enumerate(content):
            if not isinstance(part, Mapping):
                raise InvalidMessageError(
                    f"{where}content part {n} must be a mapping, got {type(part).__name__}"
                )
            _check_json_like(part, f"content[{n}]", where)
    elif content is not None:
        raise InvalidMessageError(
            f"{where}content must be a str, None or a list of parts, got {type(content).__name__}"
        )
    calls = message.tool_calls
    if not isinstance(calls, tuple):
        raise InvalidMessageError(f"{where}tool_calls must be a sequence of ToolCall")
    if calls and role != "assistant":
        raise InvalidMessageError(
            f"{where}only assistant messages may have tool_calls, not {role!r}"
        )
    for n, call in enumerate(calls):
        if not isinstance(call, ToolCall):
            raise InvalidMessageError(
                f"{where}tool_calls[{n}] must be a ToolCall, got {type(call).__name__}"
            )
        for field in ("id", "name", "arguments", "type"):
            value = getattr(call, field)
            if not isinstance(value, str):
                raise InvalidMessageError(
                    f"{where}tool_calls[{n}].{field} must be a str, got {type(value).__name__}"
                )
            _check_text(value, f"tool_calls[{n}].{field}", where)
    tool_call_id = message.tool_call_id
    if role == "tool":
        if not isinstance(tool_call_id, str) or not tool_call_id:
            raise InvalidMessageError(f"{where}a tool message needs a tool_call_id string")
    elif tool_call_id is not None and not isinstance(tool_call_id, str):
        raise InvalidMessageError(f"{where}tool_call_id must be a str or None")
    if tool_call_id is not None:
        _check_text(tool_call_id, "tool_call_id", where)
    name = message.name
    if name is not None:
        if not isinstance(name, str):
            raise InvalidMessageError(
                f"{where}name must be a str or None, got {type(name).__name__}"
            )
        _check_text(name, "name", where)
    if not isinstance(message.id, str) or not message.id:
        raise InvalidMessageError(f"{where}id must be a non-empty str")
    _check_text(message.id, "id", where)
    if not isinstance(message.metadata, Mapping):
        raise InvalidMessageError(f"{where}metadata must be a mapping")
    if message.metadata:
        _check_json_like(message.metadata, "metadata", where)
    if message.extra:
        _check_json_like(message.extra, "extra", where)
    created = message.created_at
    if created is not None:
        if not isinstance(created, datetime):
            raise InvalidMessageError(
                f"{where}created_at must be a datetime, got {type(created).__name__}"
            )
        offset = created.utcoffset()
        if offset is None:
            raise InvalidMessageError(
                f"{where}created_at must be timezone-aware (got naive {created.isoformat()})"
            )
        if created.tzinfo is not UTC:
            message = attrs.evolve(message, created_at=created.astimezone(UTC))
    return message


SystemPolicy = Literal["keep", "strip", "anywhere"]


def validate_history(messages: object, *, system: SystemPolicy = "keep") -> list[ChatMessage]:
    """Validate a loaded or imported history and return it as ``ChatMessage`` objects.

    Elements may be ``ChatMessage`` objects or OpenAI message dicts. ``developer`` (OpenAI's
    newer name for ``system``) follows the same rules as ``system``.

    Args:
        messages: the history, oldest first.
        system: ``"keep"`` (default) returns a leading ``system``/``developer`` message with
            the rest; ``"strip"`` drops it, so a history restored into an agent that sends its
            own instructions does not carry them twice (PraisonAI's restore rule). A
            non-leading one is an error with either. ``"anywhere"`` accepts instruction
            messages at any position, as ``save`` does: a stored record may hold them mid-way
            (OpenAI Agents sessions do), so ``replace`` of a record validates with it.

    Raises:
        InvalidMessageError: ``messages`` is not a list; an element is not a message or dict
            (the error names its index); any rule of :func:`validate_message` (index and
            problem named); a ``system``/``developer`` message after index 0; a ``tool``
            message whose ``tool_call_id`` matches no call of the nearest preceding
            assistant message that has tool calls.
        InvalidArgumentError: ``system`` is not ``"keep"``, ``"strip"`` or ``"anywhere"``.
    """
    if system not in ("keep", "strip", "anywhere"):
        raise InvalidArgumentError(f"system must be 'keep', 'strip' or 'anywhere', got {system!r}")
    if not isinstance(messages, list | tuple):
        raise InvalidMessageError(
            f"history must be a list of messages, got {type(messages).__name__}"
        )
    out: list[ChatMessage] = []
    for index, item in enumerate(messages):
        if isinstance(item, Mapping):
            try:
                item = ChatMessage.from_openai(item)
            except InvalidMessageError as exc:
                raise InvalidMessageError(f"message {index}: {exc}") from None
        elif not isinstance(item, ChatMessage):
            raise InvalidMessageError(
                f"message {index}: expected a ChatMessage or an OpenAI message dict, "
                f"got {type(item).__name__}"
            )
        message = validate_message(item, index)
        if message.role in INSTRUCTION_ROLES and index != 0 and system != "anywhere":
            raise InvalidMessageError(
                f"message {index}: a {message.role} message is only allowed first (index 0)"
            )
        out.append(message)
    check_tool_pairs(out)
    if system == "strip" and out and out[0].role in INSTRUCTION_ROLES:
        del out[0]
    return out


def check_tool_pairs(messages: Sequence[ChatMessage]) -> None:
    """Check each ``tool`` result answers a call of the nearest preceding assistant turn with calls.

    Raises:
        InvalidMessageError: naming the index and ``tool_call_id`` of the first orphaned result.
    """
    open_calls: set[str] | None = None
    for index, message in enumerate(messages):
        if message.role == "assistant" and message.tool_calls:
            open_calls = {call.id for call in message.tool_calls}
        elif message.role == "tool":
            if open_calls is None:
                raise InvalidMessageError(
                    f"message {index}: tool result {message.tool_call_id!r} has no preceding "
                    "assistant message with tool calls"
                )
            if message.tool_call_id not in open_calls:
                raise InvalidMessageError(
                    f"message {index}: tool result {message.tool_call_id!r} matches no call of "
                    f"the nearest preceding assistant turn (calls: {sorted(open_calls)})"
                )


def safe_window(messages: Sequence[ChatMessage], limit: int | None) -> list[ChatMessage]:
    """The newest ``limit`` messages (all when ``None``), never starting with an orphaned result.

    Leading ``tool`` messages of the window answer a call outside it, so the window's start
    moves forward past them; the result can hold fewer than ``limit`` messages.

    Raises:
        ValueError: ``limit`` is negative.
    """
    if limit is None:
        return list(messages)
    if limit <= 0:
        if limit < 0:
            raise ValueError(f"limit must be >= 0 or None, got {limit}")
        return []
    end = len(messages)
    start = max(end - limit, 0)
    while start < end and messages[start].role == "tool":
        start += 1
    window = messages[start:]
    return window if type(window) is list else list(window)  # a list slice is a new list


def turn_window(messages: Sequence[ChatMessage], limit: int | None) -> list[ChatMessage]:
    """The newest messages of a model view that still start right: the view window of a
    summarizing stack (``fetch(limit=N)``, and the raw window a fallback serves).

    The window is the leading system/developer message when the view has one (not counted
    in ``limit``: it is the prompt, with the summary merged in), then the newest messages
    from a turn boundary that fit in ``limit``: the newest whole turns that fit; when not
    even the newest turn fits, its opening user message and the newest tool-call groups
    (an assistant message and its results) that fit after it; with no user message, the
    newest groups that fit. A window never starts with a ``tool`` result, never splits a
    call from its results, and after the leading message starts with a user message
    whenever the view has one. Base stores keep :func:`safe_window`.

    Args:
        messages: the view, oldest first.
        limit: at most this many messages after the leading one (``None``: all; 0: none).

    Raises:
        ValueError: ``limit`` is negative.
    """
    if limit is None:
        return list(messages)
    if limit <= 0:
        if limit < 0:
            raise ValueError(f"limit must be >= 0 or None, got {limit}")
        return []
    lead = 1 if messages and messages[0].role in INSTRUCTION_ROLES else 0
    end = len(messages)
    if end - lead <= limit:
        return list(messages)
    head = list(messages[:lead])
    earliest = end - limit
    opener = -1
    for index in range(lead, end):
        if messages[index].role == "user":
            if index >= earliest:
                return [*head, *messages[index:]]
            opener = index
    if opener >= 0:  # the newest turn alone is longer than limit
        head.append(messages[opener])
        earliest += 1
    for index in range(max(earliest, opener + 1, lead), end):
        if messages[index].role == "assistant":
            return [*head, *messages[index:]]
    return head


def drop_orphaned_results(window: list[ChatMessage]) -> list[ChatMessage]:
    """``window`` (the newest messages a store read, oldest first) without its leading ``tool``
    results, whose calls lie outside it: the rule of :func:`safe_window` for stores that read
    only the newest ``limit`` rows. Returns ``window`` itself when nothing is dropped."""
    start = 0
    end = len(window)
    while start < end and window[start].role == "tool":
        start += 1
    return window[start:] if start else window


def split_turns(
    messages: Sequence[ChatMessage],
) -> tuple[list[ChatMessage], list[list[ChatMessage]]]:
    """Split a history into its prefix (before the first user message) and its turns.

    A turn is a user message and everything up to the next user message, so an assistant's
    tool calls and their results always stay in one turn.
    """
    prefix: list[ChatMessage] = []
    turns: list[list[ChatMessage]] = []
    for message in messages:
        if message.role == "user":
            turns.append([message])
        elif turns:
            turns[-1].append(message)
        else:
            prefix.append(message)
    return prefix, turns


def last_turns_start(messages: Sequence[ChatMessage], keep_last: int) -> int:
    """Index where the last ``keep_last`` turns begin (``len(messages)`` when ``keep_last`` is 0).

    With fewer than ``keep_last`` turns, the whole history is kept and 0 is returned.
    """
    if keep_last <= 0:
        return len(messages)
    seen = 0
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            seen += 1
            if seen == keep_last:
                return index
    return 0


def prepare_batch(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """Validate every message, set a missing ``created_at`` (one UTC ``now`` per batch) and drop
    repeats of an id within the batch (the first wins).

    Raises:
        InvalidMessageError: any message breaks a rule (its index is named); nothing is stored.
    """
    if type(messages) is not list and (
        isinstance(messages, ChatMessage | str | bytes) or not isinstance(messages, Sequence)
    ):
        raise InvalidMessageError(
            f"save_messages expects a sequence of ChatMessage, got {type(messages).__name__}"
        )
    now: datetime | None = None
    out: list[ChatMessage] = []
    seen: set[str] = set()
    for index, message in enumerate(messages):
        message = validate_message(message, index)
        if message.id in seen:
            continue
        seen.add(message.id)
        if message.created_at is None:
            if now is None:
                now = datetime.now(UTC)
            message = with_created_at(message, now)
        out.append(message)
    return out

"""Converting agent-squad ``ConversationMessage`` histories to and from ``ChatMessage``: the
mapping described in :mod:`storage.adapters.agent_squad`."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, Final

from storage.adapters import missing_extra
from storage.errors import InvalidMessageError
from storage.message import ChatMessage, ToolCall, new_message_id, thaw

try:
    from agent_squad.types import ConversationMessage  # type: ignore[import-untyped]
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra("agent-squad", "agent-squad", exc) from exc

__all__ = ["META", "from_chat_messages", "role_name", "to_chat_messages", "with_agent_prefix"]

META: Final = "agent_squad"
_TOOL_USE_KEYS: Final = frozenset({"toolUseId", "name", "input"})
_TOOL_RESULT_KEYS: Final = frozenset({"toolUseId", "content", "status"})
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def role_name(role: Any) -> str:
    """A role given as a string or a ``ParticipantRole``, as a string."""
    return role.value if isinstance(role, Enum) else role  # type: ignore[no-any-return]


def _json_roundtrips(value: Any) -> bool:
    try:
        return bool(json.loads(json.dumps(value, ensure_ascii=False)) == value)
    except (TypeError, ValueError):
        return False


def _only(block: Any, field: str) -> Any:
    """``block[field]`` when ``block`` is a mapping holding that one key, else ``None``."""
    if isinstance(block, Mapping) and len(block) == 1 and field in block:
        return block[field]
    return None


def _tool_use(block: Any) -> Mapping[str, Any] | None:
    """The ``toolUse`` payload when ``block`` has exactly the shape a ToolCall keeps."""
    use = _only(block, "toolUse")
    if (
        isinstance(use, Mapping)
        and use.keys() == _TOOL_USE_KEYS
        and isinstance(use["toolUseId"], str)
        and isinstance(use["name"], str)
        and _json_roundtrips(use["input"])
    ):
        return use
    return None


def _tool_result(block: Any) -> Mapping[str, Any] | None:
    """The ``toolResult`` payload when ``block`` has exactly the shape a tool message keeps."""
    result = _only(block, "toolResult")
    if (
        isinstance(result, Mapping)
        and _TOOL_RESULT_KEYS.issuperset(result)
        and isinstance(result.get("toolUseId"), str)
        and result["toolUseId"]
        and isinstance(result.get("content"), list)
        and all(isinstance(b, Mapping) for b in result["content"])
        and isinstance(result.get("status", ""), str)
    ):
        return result
    return None


def _blocks_to_content(blocks: list[Any]) -> Any:
    if len(blocks) == 1 and isinstance(blocks[0], Mapping) and blocks[0].keys() == {"text"}:
        text = blocks[0]["text"]
        if isinstance(text, str):
            return text
    return tuple(blocks)


def _content_to_blocks(content: Any) -> list[Any]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"text": content}]
    return thaw(content)  # type: ignore[no-any-return]


def _created_at(message: Any) -> datetime | None:
    """A ``TimestampedMessage``'s time (milliseconds since the epoch) as a UTC datetime."""
    timestamp = getattr(message, "timestamp", None)
    if isinstance(timestamp, int | float) and not isinstance(timestamp, bool) and timestamp:
        return _EPOCH + timedelta(milliseconds=timestamp)
    return None


def _interleave(layout: Any, tools: list[Any], content: list[Any], tools_first: bool) -> list[Any]:
    """Blocks in ``layout`` order (``"t"`` = next tool block, ``"c"`` = next content block)."""
    if (
        isinstance(layout, str)
        and layout.count("t") == len(tools)
        and layout.count("c") == len(content)
        and len(layout) == len(tools) + len(content)
    ):
        t, c = iter(tools), iter(content)
        return [next(t) if kind == "t" else next(c) for kind in layout]
    return tools + content if tools_first else content + tools


def to_chat_messages(message: Any) -> list[ChatMessage]:
    """Convert one agent-squad ``ConversationMessage`` (or ``TimestampedMessage``).

    Args:
        message: the message; its ``role`` may be a string or a ``ParticipantRole``.

    Returns:
        One ``ChatMessage``, or for a user message holding tool results one ``tool`` message
        per result followed by a user message for its other blocks (if any).

    Raises:
        InvalidMessageError: ``message`` has no ``role``/``content`` or its content is not a
            list of blocks, a string or ``None``.
    """
    try:
        role = role_name(message.role)
        blocks = message.content
    except AttributeError as exc:
        raise InvalidMessageError(
            f"expected an agent-squad ConversationMessage, got {type(message).__name__}"
        ) from exc
    created_at = _created_at(message)
    citations = getattr(message, "citations", None)
    first_meta: dict[str, Any] = {}
    if citations is not None:
        first_meta["citations"] = citations
    if blocks is None:
        return [ChatMessage(role, None, created_at=created_at, metadata=_wrap_meta(first_meta))]
    if isinstance(blocks, str):
        # agent-squad's own code and tests pass plain strings too: one text block, read back
        # as the string it was.
        first_meta["str"] = True
        blocks = [{"text": blocks}]
    if not isinstance(blocks, list | tuple):
        raise InvalidMessageError(
            f"ConversationMessage content must be a list of blocks, a string or None, "
            f"got {type(blocks).__name__}"
        )
    if role == "assistant":
        return [_assistant_message(blocks, created_at, first_meta)]
    if role != "user":
        value = _blocks_to_content(list(blocks))
        return [ChatMessage(role, value, created_at=created_at, metadata=_wrap_meta(first_meta))]
    return _user_messages(blocks, created_at, first_meta)


def _wrap_meta(fields: dict[str, Any]) -> dict[str, Any] | None:
    return {META: fields} if fields else None


def _split_blocks(
    blocks: Sequence[Any], tool_payload: Callable[[Any], Mapping[str, Any] | None]
) -> tuple[list[Mapping[str, Any]], list[Any], str]:
    """The tool payloads of ``blocks`` (``tool_payload``: a block's, or ``None``), the other
    blocks, and their order (``"t"`` a tool block, ``"c"`` another block)."""
    tools: list[Mapping[str, Any]] = []
    content: list[Any] = []
    layout: list[str] = []
    for block in blocks:
        payload = tool_payload(block)
        if payload is None:
            content.append(block)
            layout.append("c")
        else:
            tools.append(payload)
            layout.append("t")
    return tools, content, "".join(layout)


def _assistant_message(
    blocks: Sequence[Any], created_at: datetime | None, first_meta: dict[str, Any]
) -> ChatMessage:
    """An assistant message: text blocks as content, tool-use blocks as tool calls."""
    uses, content, layout = _split_blocks(blocks, _tool_use)
    calls = [
        ToolCall(use["toolUseId"], use["name"], json.dumps(use["input"], ensure_ascii=False))
        for use in uses
    ]
    if layout != "c" * len(content) + "t" * len(calls):
        first_meta["layout"] = layout
    value = None if calls and not content else _blocks_to_content(content)
    return ChatMessage(
        "assistant", value, calls, created_at=created_at, metadata=_wrap_meta(first_meta)
    )


def _user_messages(
    blocks: Sequence[Any], created_at: datetime | None, first_meta: dict[str, Any]
) -> list[ChatMessage]:
    """A user message; one holding tool results becomes a ``tool`` message per result, then a
    user message for its other blocks (if any), all naming one group."""
    results, content, layout = _split_blocks(blocks, _tool_result)
    if not results:
        value = _blocks_to_content(content)
        return [ChatMessage("user", value, created_at=created_at, metadata=_wrap_meta(first_meta))]
    if layout != "t" * len(results) + "c" * len(content):
        first_meta["layout"] = layout
    count = len(results) + (1 if content else 0)
    ids = [new_message_id() for _ in range(count)]
    out = [
        _tool_message(result, ids[n], ids[0], created_at, first_meta if n == 0 else {})
        for n, result in enumerate(results)
    ]
    if content:
        out.append(
            ChatMessage(
                "user",
                _blocks_to_content(content),
                id=ids[-1],
                created_at=created_at,
                metadata={META: {"group": ids[0]}},
            )
        )
    return out


def _tool_message(
    result: Mapping[str, Any],
    message_id: str,
    group: str,
    created_at: datetime | None,
    first_meta: dict[str, Any],
) -> ChatMessage:
    # Every piece names its group, so two user messages in a row never merge.
    meta: dict[str, Any] = dict(first_meta)
    meta["group"] = group
    if "status" in result:
        meta["status"] = result["status"]
    result_blocks, json_blocks = _json_as_text(list(result["content"]))
    if json_blocks:
        meta["json"] = json_blocks
    return ChatMessage(
        "tool",
        _blocks_to_content(result_blocks),
        tool_call_id=result["toolUseId"],
        id=message_id,
        created_at=created_at,
        metadata={META: meta},
    )


def _meta(message: ChatMessage) -> Mapping[str, Any]:
    value = message.metadata.get(META)
    return value if isinstance(value, Mapping) else {}


def _json_as_text(blocks: list[Any]) -> tuple[list[Any], list[int]]:
    """A tool result's ``{"json": value}`` blocks as ``{"text": "<the JSON>"}`` blocks, and
    their positions: a tool message's text is what a scrubbing layer reads (as JSON, value
    by value) and what chat APIs take as a tool's output."""
    out: list[Any] = []
    positions: list[int] = []
    for n, block in enumerate(blocks):
        if isinstance(block, Mapping) and block.keys() == {"json"} and _json_roundtrips(block):
            out.append({"text": json.dumps(block["json"], ensure_ascii=False)})
            positions.append(n)
        else:
            out.append(block)
    return out, positions


def _text_as_json(blocks: list[Any], positions: Any) -> list[Any]:
    """The inverse of :func:`_json_as_text`."""
    if not isinstance(positions, list | tuple):
        return blocks
    for n in positions:
        if isinstance(n, int) and 0 <= n < len(blocks) and isinstance(blocks[n], Mapping):
            # Text another writer made not JSON is kept as text.
            with contextlib.suppress(TypeError, ValueError):
                blocks[n] = {"json": json.loads(blocks[n].get("text"))}
    return blocks


def _tool_result_block(message: ChatMessage) -> dict[str, Any]:
    blocks = _text_as_json(_content_to_blocks(message.content), _meta(message).get("json"))
    result: dict[str, Any] = {"toolUseId": message.tool_call_id, "content": blocks}
    status = _meta(message).get("status")
    if status is not None:
        result["status"] = status
    return {"toolResult": result}


def _tool_use_block(call: ToolCall) -> dict[str, Any]:
    try:
        value: Any = json.loads(call.arguments)
    except ValueError:
        value = call.arguments  # arguments that are not JSON (saved by another writer)
    return {"toolUse": {"toolUseId": call.id, "name": call.name, "input": value}}


def _conversation_message(
    role: str, blocks: list[Any] | str | None, first: Mapping[str, Any]
) -> ConversationMessage:
    citations = first.get("citations")
    return ConversationMessage(role, blocks, thaw(citations) if citations is not None else None)


def _from_group(group: list[ChatMessage]) -> ConversationMessage:
    """One user message from its tool results and (optional) user-text message."""
    first = _meta(group[0])
    tools = [_tool_result_block(m) for m in group if m.role == "tool"]
    content: list[Any] = []
    for m in group:
        if m.role != "tool":
            content.extend(_content_to_blocks(m.content))
    blocks = _interleave(first.get("layout"), tools, content, tools_first=True)
    return _conversation_message("user", blocks, first)


def _from_single(message: ChatMessage) -> ConversationMessage:
    first = _meta(message)
    role = message.role
    if role == "system" and message.is_summary:
        role = "user"
    if role == "assistant" and message.tool_calls:
        tools = [_tool_use_block(call) for call in message.tool_calls]
        content = _content_to_blocks(message.content)
        blocks = _interleave(first.get("layout"), tools, content, tools_first=False)
        return _conversation_message(role, blocks, first)
    if message.content is None:
        return _conversation_message(role, None, first)
    if first.get("str") and isinstance(message.content, str):
        return _conversation_message(role, message.content, first)
    return _conversation_message(role, _content_to_blocks(message.content), first)


def from_chat_messages(messages: Sequence[ChatMessage]) -> list[ConversationMessage]:
    """Convert a history back to agent-squad messages, re-forming split user messages.

    Messages of one group (``metadata["agent_squad"]["group"]``) become one user message;
    consecutive ``tool`` messages without a group (written by another adapter) become one
    user message of ``toolResult`` blocks, as Bedrock expects. A leading summary (a user
    message here) followed by a user message is joined with it, its blocks first, so the
    history alternates user and assistant.
    """
    out: list[ConversationMessage] = []
    index = 0
    count = len(messages)
    while index < count:
        message = messages[index]
        group = _meta(message).get("group")
        if group is not None:
            end = index + 1
            while end < count and _meta(messages[end]).get("group") == group:
                end += 1
            out.append(_from_group(list(messages[index:end])))
            index = end
        elif message.role == "tool":
            end = index + 1
            while (
                end < count
                and messages[end].role == "tool"
                and _meta(messages[end]).get("group") is None
            ):
                end += 1
            out.append(_from_group(list(messages[index:end])))
            index = end
        else:
            out.append(_from_single(message))
            index += 1
    if len(out) > 1 and messages[0].is_summary and out[0].role == out[1].role == "user":
        out[:2] = [_joined(out[0], out[1])]
    return out


def _blocks(message: ConversationMessage) -> list[Any]:
    content = message.content
    if content is None:
        return []
    return [{"text": content}] if isinstance(content, str) else list(content)


def _joined(summary: ConversationMessage, turn: ConversationMessage) -> ConversationMessage:
    """The summary (a user message) and the user message after it as one user message, its
    blocks first: roles alternate, as Bedrock's Converse API requires ("A conversation must
    alternate between user and assistant roles", ``ValidationException`` otherwise)."""
    citations = getattr(turn, "citations", None)
    return ConversationMessage("user", [*_blocks(summary), *_blocks(turn)], citations)


def with_agent_prefix(message: ConversationMessage, agent_id: str) -> ConversationMessage:
    """agent-squad's merged view: ``[agent_id] text`` as the assistant message's one block."""
    content = message.content
    if message.role != "assistant" or not content:
        return message
    for block in content:
        if isinstance(block, Mapping) and isinstance(block.get("text"), str):
            return ConversationMessage("assistant", [{"text": f"[{agent_id}] {block['text']}"}])
    return message

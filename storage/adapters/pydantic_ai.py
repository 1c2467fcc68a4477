"""pydantic-ai adapter: load a conversation as ``message_history``, save a run's new messages.

Example::

    history = PydanticAIHistory(stack, ChatKey("user-1", "session-1", "support"))
    result = await agent.run(prompt, message_history=await history.load())
    await history.save(result.new_messages())

pydantic-ai keeps a conversation as ``ModelRequest`` / ``ModelResponse`` objects, each holding
parts. Mapping to ``ChatMessage`` (lossless: ``load`` gives back what ``save`` was given, equal
in pydantic-ai's own JSON, timestamps, usage and ids included):

- a request's ``system-prompt`` part becomes a ``system`` message, a ``user-prompt`` part a
  ``user`` message (a string, or one text part per string of a multi-modal prompt), a
  ``tool-return`` part a ``tool`` message (``tool_call_id`` kept; a non-string return value
  as its JSON text), a ``retry-prompt`` part a ``tool`` message when it answers a tool call,
  else a ``user`` message;
- a response becomes one ``assistant`` message: its ``text`` parts as the content, each
  ``tool-call`` part as a ``ToolCall`` (``args`` as the exact JSON string);
- everything else (the message's own fields, ``thinking`` parts, files, built-in tool parts,
  images) is kept in ``metadata["pydantic_ai"]`` with the part order, and restored exactly.

Texts, tool arguments and tool results live in the message fields, so a scrubbing layer sees
them; parts kept whole in metadata are stored as given. Ids are derived from the messages
themselves, so saving the same ``new_messages()`` twice stores them once. A summarizing
stack's view (a summary, then the newest turns) loads as a ``system-prompt`` part (marked
in its ``metadata``, which no model sees) at the start of the first request after it, as
pydantic-ai's own merge of consecutive requests puts it; saving it again (``save`` of
``result.all_messages()``) stores nothing of it. A stored group cut by the view's start loads
in the default shapes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from storage.adapters import missing_extra
from storage.errors import InvalidMessageError
from storage.message import ChatKey, ChatMessage, ToolCall, thaw
from storage.protocol import ChatStorage

try:
    from pydantic_ai.messages import (
        ModelMessage,
        ModelMessagesTypeAdapter,
        ModelRequest,
        ModelResponse,
        SystemPromptPart,
    )
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra("pydantic-ai", "pydantic-ai", exc) from exc

__all__ = ["PydanticAIHistory", "from_chat_messages", "to_chat_messages"]

META: Final = "pydantic_ai"
# The mark of a summary's system-prompt part in a loaded view (a part's ``metadata`` stays with
# it when pydantic-ai merges requests, and is never sent to a model): saving it again, as
# ``result.all_messages()`` does, stores nothing of it.
SUMMARY_MARK: Final = {"chatlayers": {"summary": True}}
_PART_METADATA: Final = "metadata" in getattr(SystemPromptPart, "__dataclass_fields__", {})
_TEXT_KINDS: Final = {
    "system-prompt",
    "user-prompt",
    "tool-return",
    "retry-prompt",
    "retry-feedback",
}


def _dump(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    for index, message in enumerate(messages):
        if not isinstance(message, ModelRequest | ModelResponse):
            raise InvalidMessageError(
                f"message {index}: expected a pydantic-ai ModelRequest or ModelResponse, "
                f"got {type(message).__name__}"
            )
    try:
        dumped: list[dict[str, Any]] = ModelMessagesTypeAdapter.dump_python(
            list(messages), mode="json"
        )
    except Exception as exc:  # pydantic raises several types for bad input
        raise InvalidMessageError(f"not pydantic-ai messages: {exc}") from exc
    return dumped


def _as_text(value: Any) -> tuple[str, bool]:
    """``(text, was_json)``: a string as is, anything else as its JSON text."""
    if isinstance(value, str):
        return value, False
    return json.dumps(value, ensure_ascii=False), True


class _Member:
    """One chat message being built from the parts of one pydantic-ai message."""

    def __init__(self, role: str) -> None:
        self.role = role
        self.entries: list[dict[str, Any]] = []
        self.content: Any = None
        self.texts: list[str] = []
        self.calls: list[ToolCall] = []
        self.tool_call_id: str | None = None
        self.mapped = False


def _request_members(parts: list[dict[str, Any]]) -> list[_Member]:
    members: list[_Member] = []
    current: _Member | None = None
    for part in parts:
        kind = part.get("part_kind")
        content = part.get("content")
        mapped = kind in _TEXT_KINDS and (
            kind != "user-prompt"
            or isinstance(content, str)
            or (isinstance(content, list) and any(isinstance(c, str) for c in content))
        )
        if not mapped:
            if current is None:
                current = _Member("user")
                members.append(current)
            current.entries.append({"k": "o", "i": part})
            continue
        if current is None or current.mapped:
            current = _Member("user")
            members.append(current)
        current.mapped = True
        skeleton = {**part, "content": None}
        entry: dict[str, Any] = {"k": "x", "i": skeleton}
        if kind == "system-prompt" and isinstance(content, str):
            current.role, current.content = "system", content
        elif kind == "user-prompt" and isinstance(content, str):
            current.content = content
        elif kind == "user-prompt" and isinstance(content, list):
            # Strings become text parts; other items stay whole in their slot.
            items = [None if isinstance(c, str) else c for c in content]
            skeleton["content"] = items
            current.content = [{"type": "text", "text": c} for c in content if isinstance(c, str)]
        elif kind == "tool-return" or (
            kind == "retry-prompt" and part.get("tool_name") and part.get("tool_call_id")
        ):
            text, was_json = _as_text(content)
            current.role, current.content = "tool", text
            current.tool_call_id = str(part.get("tool_call_id"))
            entry["json"] = was_json
        else:  # a system prompt that is not a string, a retry prompt answering no call
            text, was_json = _as_text(content)
            current.content = text
            entry["json"] = was_json
        current.entries.append(entry)
    return members


def _response_member(parts: list[dict[str, Any]]) -> _Member:
    member = _Member("assistant")
    for part in parts:
        kind = part.get("part_kind")
        if kind == "text" and isinstance(part.get("content"), str):
            member.texts.append(part["content"])
            member.entries.append({"k": "t", "i": {**part, "content": None}})
        elif kind == "tool-call" and isinstance(part.get("tool_call_id"), str):
            args = part.get("args")
            arguments, was_json = (args, False) if isinstance(args, str) else _as_text(args)
            if args is None:
                arguments, was_json = "", False
            member.calls.append(ToolCall(part["tool_call_id"], str(part["tool_name"]), arguments))
            skeleton = {**part, "tool_name": None, "args": None, "tool_call_id": None}
            member.entries.append({"k": "c", "i": skeleton, "json": was_json, "none": args is None})
        else:
            member.entries.append({"k": "o", "i": part})
    if len(member.texts) == 1:
        member.content = member.texts[0]
    elif member.texts:
        member.content = [{"type": "text", "text": t} for t in member.texts]
    return member


def to_chat_messages(messages: Sequence[ModelMessage], *, salt: str = "") -> list[ChatMessage]:
    """Convert pydantic-ai messages to chat messages (see the module docstring).

    Each id is a hash of ``salt`` (the adapter passes its key) and the message, so converting
    the same messages again gives the same ids.

    Raises:
        InvalidMessageError: ``messages`` are not pydantic-ai messages.
    """
    out: list[ChatMessage] = []
    for dumped in _dump(messages):
        parts = dumped.pop("parts")
        if dumped.get("kind") != "response" and parts:
            parts = [p for p in parts if p.get("metadata") != SUMMARY_MARK]
            if not parts:
                continue  # a loaded summary: the stack holds it already, beside the record
        if dumped.get("kind") == "response":
            members = [_response_member(parts)]
        else:
            members = _request_members(parts) or [_Member("user")]
        digest = hashlib.blake2b(
            json.dumps([salt, dumped, parts], sort_keys=True).encode(), digest_size=12
        ).hexdigest()
        for index, member in enumerate(members):
            meta: dict[str, Any] = {"g": digest, "i": index, "n": len(members), "p": member.entries}
            if index == 0:
                meta["m"] = dumped
            out.append(
                ChatMessage(
                    member.role,
                    member.content,
                    member.calls,
                    member.tool_call_id,
                    id=f"pai-{digest}-{index}",
                    metadata={META: meta},
                )
            )
    return out


def _text_of(message: ChatMessage) -> list[str]:
    content = thaw(message.content)
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [str(p.get("text", "")) for p in content if isinstance(p, Mapping)]
    return []


def _restore_group(group: list[ChatMessage]) -> dict[str, Any]:
    meta0 = thaw(group[0].metadata[META])
    message: dict[str, Any] = dict(meta0["m"])
    parts: list[dict[str, Any]] = []
    for chat in group:
        meta = thaw(chat.metadata[META])
        texts = iter(_text_of(chat))
        calls = iter(chat.tool_calls)
        for entry in meta["p"]:
            kind, part = entry["k"], dict(entry["i"])
            if kind == "o":
                parts.append(part)
            elif kind == "t":
                parts.append({**part, "content": next(texts, "")})
            elif kind == "c":
                call = next(calls, None)
                if call is None:
                    continue
                args: Any = call.arguments
                if entry.get("none"):
                    args = None
                elif entry.get("json"):
                    args = json.loads(call.arguments)
                parts.append(
                    {**part, "tool_name": call.name, "args": args, "tool_call_id": call.id}
                )
            else:  # "x": a request part whose text is the message's content
                content: Any
                if isinstance(part.get("content"), list):
                    content = [next(texts, "") if c is None else c for c in part["content"]]
                else:
                    text = "".join(_text_of(chat))
                    content = json.loads(text) if entry.get("json") else text
                if part.get("part_kind") in ("tool-return", "retry-prompt") and chat.tool_call_id:
                    part["tool_call_id"] = chat.tool_call_id
                parts.append({**part, "content": content})
    message["parts"] = parts
    return message


def _default(message: ChatMessage, tool_names: Mapping[str, str]) -> dict[str, Any]:
    """The pydantic-ai shape of a message written by other code (or a summary)."""
    text = "".join(_text_of(message))
    if message.role == "assistant":
        parts: list[dict[str, Any]] = []
        if text or not message.tool_calls:
            parts.append({"part_kind": "text", "content": text})
        parts += [
            {
                "part_kind": "tool-call",
                "tool_name": c.name,
                "args": c.arguments,
                "tool_call_id": c.id,
            }
            for c in message.tool_calls
        ]
        return {"kind": "response", "parts": parts}
    part: dict[str, Any]
    if message.role == "tool":
        call_id = message.tool_call_id or ""
        part = {
            "part_kind": "tool-return",
            "tool_name": tool_names.get(call_id, ""),
            "content": text,
            "tool_call_id": call_id,
        }
    elif message.role == "system":
        part = {"part_kind": "system-prompt", "content": text}
        if message.is_summary and _PART_METADATA:
            part["metadata"] = SUMMARY_MARK
    else:
        part = {"part_kind": "user-prompt", "content": text}
    return {"kind": "request", "parts": [part]}


def _summary_joins_next(out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A request of only summary parts put at the start of the request after it: the shape
    pydantic-ai's own merge of consecutive requests gives, so ``all_messages()`` holds that
    request as loaded and saving it again stores nothing new."""
    joined: list[dict[str, Any]] = []
    for shape in out:
        last = joined[-1] if joined else None
        if (
            last is not None
            and last["kind"] == "request"
            and shape["kind"] == "request"
            and last["parts"]
            and all(p.get("metadata") == SUMMARY_MARK for p in last["parts"])
        ):
            joined[-1] = {**shape, "parts": [*last["parts"], *shape["parts"]]}
        else:
            joined.append(shape)
    return joined


def from_chat_messages(messages: Sequence[ChatMessage]) -> list[ModelMessage]:
    """The pydantic-ai messages stored chat messages stand for (new objects on every call).

    Consecutive request-side messages written by other code merge into one ``ModelRequest``.
    """
    tool_names = {c.id: c.name for m in messages for c in m.tool_calls}
    out: list[dict[str, Any]] = []
    merge_default = False
    index = 0
    while index < len(messages):
        message = messages[index]
        meta = message.metadata.get(META)
        if isinstance(meta, Mapping) and meta.get("i") == 0 and "m" in meta:
            count = int(meta["n"])
            group = list(messages[index : index + count])
            if len(group) == count and all(
                isinstance(g.metadata.get(META), Mapping)
                and g.metadata[META].get("g") == meta["g"]
                and g.metadata[META].get("i") == n
                for n, g in enumerate(group)
            ):
                out.append(_restore_group(group))
                index += count
                merge_default = False
                continue
        shape = _default(message, tool_names)
        if merge_default and shape["kind"] == "request" and out[-1]["kind"] == "request":
            out[-1]["parts"].extend(shape["parts"])
        else:
            out.append(shape)
        merge_default = shape["kind"] == "request"
        index += 1
    out = _summary_joins_next(out)
    restored: list[ModelMessage] = ModelMessagesTypeAdapter.validate_python(out)
    return restored


class PydanticAIHistory:
    """One conversation of a chatlayers stack as pydantic-ai message history.

    Args:
        stack: any ``ChatStorage``.
        key: the conversation.
        limit: ``load`` reads at most this many newest stored messages (``None``: all; the
            window never starts with a tool result whose call it lacks).

    Raises:
        InvalidMessageError: a message cannot be converted or stored (nothing is stored).
        StorageUnavailableError: the stack's backend cannot be reached.
    """

    def __init__(self, stack: ChatStorage, key: ChatKey, *, limit: int | None = None) -> None:
        self.stack = stack
        self.key = key
        self.limit = limit

    async def load(self) -> list[ModelMessage]:
        """The conversation as ``message_history`` (a summarizing stack's view), oldest first."""
        return from_chat_messages(await self.stack.fetch(self.key, limit=self.limit))

    async def save(self, messages: Sequence[ModelMessage]) -> None:
        """Store ``messages`` (typically ``result.new_messages()``) as one atomic batch;
        messages already stored are skipped, and so is a loaded summary (a summarized view
        saved back with ``result.all_messages()`` stores only the run's new messages)."""
        key = self.key
        batch = to_chat_messages(messages, salt=f"{key.user_id}\0{key.session_id}\0{key.agent_id}")
        if batch:
            await self.stack.save_messages(self.key, batch)

    async def clear(self) -> None:
        """Erase the conversation."""
        await self.stack.delete(self.key)

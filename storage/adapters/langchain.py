"""LangChain adapter: a chatlayers stack as a ``BaseChatMessageHistory``.

``LangChainChatMessageHistory(stack, key)`` plugs into ``RunnableWithMessageHistory`` and
anything else that takes a LangChain chat history. Async methods (``aget_messages``,
``aadd_messages``, ``aclear``) run natively on the caller's loop; sync ones (``messages``,
``add_messages``, ``clear``) go through a :class:`~storage.sync.SyncChatStorage` portal.

Mapping (lossless for the message types below; the tests round-trip them):

- ``HumanMessage`` → ``user``, ``AIMessage`` → ``assistant`` (``tool_calls`` become
  ``ToolCall`` objects, ``args`` as a JSON string), ``SystemMessage`` → ``system``,
  ``ToolMessage`` → ``tool`` (``tool_call_id`` kept), a ``ChatMessage`` whose role is one of
  those four → that role; chunks map like their message type.
- ``content`` strings stay strings; content lists become parts (a bare string element becomes
  a ``{"type": "text"}`` part, remembered); the LangChain ``id`` becomes the message id, so
  adding the same message twice stores it once.
- a tool call with the id ``""`` and a ``ToolMessage`` with ``tool_call_id=""`` (what
  LangChain's tool node answers such a call with) are stored with the id
  ``"chatlayers-no-call-id"``, so the pair stays a pair, and read back as given.
- Fields with no chat equivalent (``additional_kwargs``, ``response_metadata``,
  ``usage_metadata``, ``artifact``, a tool message's ``status``, ...) are kept in
  ``metadata["langchain"]`` when they differ from their defaults. Metadata is stored as
  given (a scrubbing layer rewrites text, tool arguments and results, not metadata).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Final

from storage.adapters import NO_CALL_ID, missing_extra, split_stack
from storage.errors import InvalidMessageError
from storage.message import ROLES, ChatKey, ChatMessage, ToolCall, thaw
from storage.protocol import ChatStorage
from storage.sync import SyncChatStorage

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import BaseMessage, messages_from_dict
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra("langchain-core", "langchain", exc) from exc

__all__ = ["LangChainChatMessageHistory", "from_chat_message", "to_chat_message"]

META: Final = "langchain"
_ROLE_OF_TYPE: Final = {
    "human": "user",
    "HumanMessageChunk": "user",
    "ai": "assistant",
    "AIMessageChunk": "assistant",
    "system": "system",
    "SystemMessageChunk": "system",
    "tool": "tool",
    "ToolMessageChunk": "tool",
}
# LangChain has no developer message type: OpenAI's newer name for system maps to SystemMessage.
_TYPE_OF_ROLE: Final = {
    "user": "human",
    "assistant": "ai",
    "system": "system",
    "developer": "system",
    "tool": "tool",
}
# Fields held by ChatMessage itself (everything else goes to metadata when not default).
_MAPPED: Final = frozenset({"content", "type", "name", "id", "tool_calls", "tool_call_id", "role"})


def _default(message: BaseMessage, field: str) -> Any:
    info = type(message).model_fields.get(field)
    if info is None:
        return None
    if info.default_factory is not None:
        return info.default_factory()  # type: ignore[call-arg]
    return info.default


def to_chat_message(message: BaseMessage) -> ChatMessage:
    """Convert one LangChain message.

    Raises:
        InvalidMessageError: not a ``BaseMessage``; a type with no chat role (function or
            remove messages, a ``ChatMessage`` with another role); tool-call ``args`` that
            are not JSON data.
    """
    if not isinstance(message, BaseMessage):
        raise InvalidMessageError(f"expected a LangChain BaseMessage, got {type(message).__name__}")
    data = message.model_dump()
    lc_type = data["type"]
    if lc_type in ("chat", "ChatMessageChunk"):
        role = data.get("role")
    else:
        role = _ROLE_OF_TYPE.get(lc_type)
    if role not in ROLES:
        raise InvalidMessageError(
            f"LangChain {type(message).__name__} (type {lc_type!r}, role {role!r}) has no "
            f"chat role: expected a human, ai, system or tool message"
        )
    meta: dict[str, Any] = {}
    if lc_type != _TYPE_OF_ROLE[role]:
        meta["type"] = lc_type
    content = _content(data["content"], meta)
    calls = _tool_calls(data.get("tool_calls") or (), meta)
    tool_call_id = data.get("tool_call_id")
    if role == "tool" and tool_call_id == "":
        # LangChain answers a call without an id with tool_call_id="" (a chat message needs
        # one): both sides get the same stand-in, so the pair stays a pair.
        tool_call_id = NO_CALL_ID
        meta["empty_tool_call_id"] = True
    fields = {k: v for k, v in data.items() if k not in _MAPPED and v != _default(message, k)}
    if fields:
        meta["fields"] = fields
    kwargs: dict[str, Any] = {}
    if isinstance(data.get("id"), str) and data["id"]:
        kwargs["id"] = data["id"]
    else:
        meta["no_id"] = True
    return ChatMessage(
        role,
        content,
        calls,
        tool_call_id,
        data.get("name"),
        metadata={META: meta} if meta else None,
        **kwargs,
    )


def _content(content: Any, meta: dict[str, Any]) -> Any:
    """The content; bare strings in a list become text parts, their positions noted in ``meta``."""
    if not isinstance(content, list):
        return content
    parts: list[Any] = []
    strings: list[int] = []
    for n, part in enumerate(content):
        if isinstance(part, str):
            strings.append(n)
            parts.append({"type": "text", "text": part})
        else:
            parts.append(part)
    if strings:
        meta["str_parts"] = strings
    return parts


def _tool_calls(entries: Sequence[Mapping[str, Any]], meta: dict[str, Any]) -> list[ToolCall]:
    """LangChain tool calls as ``ToolCall``; ``None`` and empty ids are noted in ``meta``.

    Raises:
        InvalidMessageError: a call's ``args`` are not JSON data.
    """
    calls: list[ToolCall] = []
    null_ids: list[int] = []
    empty_ids: list[int] = []
    for n, call in enumerate(entries):
        try:
            arguments = json.dumps(call["args"], ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise InvalidMessageError(
                f"tool call {n} ({call.get('name')!r}): args are not JSON data: {exc}"
            ) from exc
        call_id = call.get("id")
        if call_id is None:
            null_ids.append(n)
        elif call_id == "":
            empty_ids.append(n)
        stored_id = "" if call_id is None else call_id or NO_CALL_ID
        calls.append(ToolCall(stored_id, call["name"], arguments))
    if null_ids:
        meta["null_call_ids"] = null_ids
    if empty_ids:
        meta["empty_call_ids"] = empty_ids
    return calls


def from_chat_message(message: ChatMessage) -> BaseMessage:
    """The LangChain message a stored message stands for (a new object on every call).

    Messages written by other code (no ``metadata["langchain"]``) get the plain type of their
    role; ``None`` content becomes ``""``; tool-call arguments that are not a JSON object
    become ``invalid_tool_calls``.
    """
    meta_value = message.metadata.get(META)
    meta: Mapping[str, Any] = meta_value if isinstance(meta_value, Mapping) else {}
    lc_type = meta.get("type") or _TYPE_OF_ROLE[message.role]
    content: Any = message.content
    if content is None:
        content = ""
    elif not isinstance(content, str):
        content = thaw(content)
        for n in meta.get("str_parts", ()):
            if n < len(content) and isinstance(content[n], dict):
                content[n] = content[n].get("text", "")
    data: dict[str, Any] = {
        "content": content,
        "name": message.name,
        "id": None if meta.get("no_id") else message.id,
    }
    data.update(thaw(meta.get("fields", {})))
    if message.tool_calls:
        null_ids = set(meta.get("null_call_ids", ()))
        empty_ids = set(meta.get("empty_call_ids", ()))
        calls: list[dict[str, Any]] = []
        invalid: list[dict[str, Any]] = list(data.get("invalid_tool_calls", ()))
        for n, call in enumerate(message.tool_calls):
            call_id = None if n in null_ids else "" if n in empty_ids else call.id
            try:
                args = json.loads(call.arguments)
            except ValueError:
                args = None
            if isinstance(args, dict):
                calls.append({"name": call.name, "args": args, "id": call_id, "type": "tool_call"})
            else:
                invalid.append(
                    {
                        "name": call.name,
                        "args": call.arguments,
                        "id": call_id,
                        "error": None,
                        "type": "invalid_tool_call",
                    }
                )
        data["tool_calls"] = calls
        if invalid:
            data["invalid_tool_calls"] = invalid
    if message.role == "tool":
        data["tool_call_id"] = "" if meta.get("empty_tool_call_id") else message.tool_call_id
    if lc_type in ("chat", "ChatMessageChunk"):
        data["role"] = message.role
    return messages_from_dict([{"type": lc_type, "data": data}])[0]


class LangChainChatMessageHistory(BaseChatMessageHistory):
    """One conversation of a chatlayers stack as a LangChain chat message history.

    Args:
        stack: a ``ChatStorage``, or a :class:`~storage.sync.SyncChatStorage` to share one
            portal thread between many histories (recommended for sync use: a plain stack
            gets a portal of its own per history, started on its first sync call and
            stopped when the history is garbage-collected).
        key: the conversation.
        limit: read at most this many newest messages (``None``: the whole conversation).

    Raises:
        InvalidMessageError: a message cannot be converted or stored (nothing is stored).
        StorageUnavailableError: the stack's backend cannot be reached.
    """

    def __init__(
        self,
        stack: ChatStorage | SyncChatStorage,
        key: ChatKey,
        *,
        limit: int | None = None,
    ) -> None:
        super().__init__()
        self.stack, self._sync = split_stack(stack)
        self.key = key
        self.limit = limit

    @property
    def sync(self) -> SyncChatStorage:
        """The portal the sync methods use (created on first use when not given)."""
        if self._sync is None:
            sync = SyncChatStorage(self.stack, close_stack=False)
            weakref.finalize(self, sync.close)
            self._sync = sync
        return self._sync

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The conversation, oldest first (blocking)."""
        return [from_chat_message(m) for m in self.sync.fetch(self.key, limit=self.limit)]

    async def aget_messages(self) -> list[BaseMessage]:
        """The conversation, oldest first."""
        return [from_chat_message(m) for m in await self.stack.fetch(self.key, limit=self.limit)]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store the messages as one atomic batch (blocking)."""
        batch = [to_chat_message(m) for m in messages]
        if batch:
            self.sync.save_messages(self.key, batch)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store the messages as one atomic batch."""
        batch = [to_chat_message(m) for m in messages]
        if batch:
            await self.stack.save_messages(self.key, batch)

    def clear(self) -> None:
        """Erase the conversation (blocking)."""
        self.sync.delete(self.key)

    async def aclear(self) -> None:
        """Erase the conversation."""
        await self.stack.delete(self.key)

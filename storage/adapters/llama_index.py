"""LlamaIndex adapter: a chatlayers stack as a ``BaseChatStore``.

``LlamaIndexChatStore(stack, user_id=...)`` plugs into ``ChatMemoryBuffer`` (and anything else
that takes a LlamaIndex ``chat_store``); a LlamaIndex chat-store key names a session
(``ChatKey(user_id, key, agent_id)``). Async methods run natively on the caller's loop; the
sync ones go through a :class:`~storage.sync.SyncChatStorage` portal.

Mapping (lossless; the tests round-trip every block type LlamaIndex builds for chat):

- roles ``user``, ``assistant``, ``system``, ``tool`` map to themselves; ``developer`` is kept
  as ``system``, ``chatbot`` and ``model`` as ``assistant``, ``function`` as ``tool`` (the
  original role is remembered);
- the text of every ``TextBlock`` becomes the content (a string for a single text block, else
  one text part per block); each ``ToolCallBlock`` and each OpenAI-shaped entry of
  ``additional_kwargs["tool_calls"]`` becomes a ``ToolCall``; a tool message's
  ``additional_kwargs["tool_call_id"]`` becomes ``tool_call_id`` (a tool message without one
  is stored with ``"chatlayers-no-call-id"`` and read back without it);
- everything else (other blocks such as images, other ``additional_kwargs``, block order) is
  kept in ``metadata["llama_index"]`` and restored exactly. Texts and tool arguments live in
  the message fields, so a scrubbing layer sees them; blocks kept whole are stored as given.

``get_messages`` returns the stack's ``fetch`` (a summarizing stack's view); the editing
methods (``set_messages``, ``add_message(idx=...)``, ``delete_message``,
``delete_last_message``) work on the raw record under its version
(:func:`storage.adapters.rewrite.edit`): appends stay appends (``save_messages_if``), anything
else is one atomic ``replace`` when the stack has ``ReplaceableStorage`` (else delete then
save), and an edit that finds the record changed since it read it (a message appended by
another worker) reads it again and re-applies itself, so it never erases that message; a
delete removes the message it first found at that position.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from storage.adapters import NO_CALL_ID, missing_extra, split_stack
from storage.adapters.rewrite import edit, insert, raw_history
from storage.errors import InvalidMessageError
from storage.message import ChatKey, ChatMessage, ToolCall, thaw
from storage.protocol import ChatStorage
from storage.sync import SyncChatStorage

try:
    from llama_index.core.base.llms.types import ChatMessage as LlamaMessage
    from llama_index.core.storage.chat_store.base import BaseChatStore
    from pydantic import PrivateAttr
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra("llama-index-core", "llama-index", exc) from exc

__all__ = ["LlamaIndexChatStore", "from_chat_message", "to_chat_message"]

META: Final = "llama_index"
_ROLE: Final = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "tool": "tool",
    "developer": "system",
    "chatbot": "assistant",
    "model": "assistant",
    "function": "tool",
}


def _openai_call(entry: Any) -> ToolCall | None:
    """A ``ToolCall`` from an OpenAI-shaped ``tool_calls`` entry (a dict), else ``None``."""
    if not isinstance(entry, Mapping):
        return None
    function = entry.get("function")
    if not isinstance(function, Mapping):
        return None
    call_id, name, arguments = entry.get("id"), function.get("name"), function.get("arguments")
    if isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str):
        return ToolCall(call_id, name, arguments)
    return None


def to_chat_message(message: LlamaMessage) -> ChatMessage:
    """Convert one LlamaIndex chat message (see the module docstring).

    Raises:
        InvalidMessageError: not a LlamaIndex ``ChatMessage``, or holding data that is not JSON.
    """
    if not isinstance(message, LlamaMessage):
        raise InvalidMessageError(
            f"expected a LlamaIndex ChatMessage, got {type(message).__name__}"
        )
    try:
        data = message.model_dump(mode="json")
    except (TypeError, ValueError) as exc:
        raise InvalidMessageError(f"LlamaIndex message is not JSON data: {exc}") from exc
    llama_role = str(data.get("role"))
    role = _ROLE.get(llama_role)
    if role is None:
        raise InvalidMessageError(f"LlamaIndex role {llama_role!r} has no chat role")
    texts, calls, skeleton_blocks = _read_blocks(data.get("blocks") or ())
    extra = dict(data.get("additional_kwargs") or {})
    tool_call_id: str | None = None
    if role == "tool" and isinstance(extra.get("tool_call_id"), str):
        tool_call_id = extra.pop("tool_call_id")
    block_calls = len(calls)
    calls.extend(_kwarg_calls(extra))
    content: Any = texts[0] if len(texts) == 1 else [{"type": "text", "text": t} for t in texts]
    if not texts:
        content = None
    meta: dict[str, Any] = {}
    if llama_role != role:
        meta["role"] = llama_role
    if skeleton_blocks != ["t"]:
        meta["blocks"] = skeleton_blocks
    if extra:
        meta["kwargs"] = extra
    if block_calls:
        meta["block_calls"] = block_calls
    if role == "tool" and tool_call_id is None:
        # LlamaIndex's own stores keep a tool message without a call id.
        meta["no_call_id"] = True
        tool_call_id = NO_CALL_ID
    return ChatMessage(
        role,
        content,
        calls,
        tool_call_id,
        metadata={META: meta} if meta else None,
    )


def _read_blocks(blocks: Sequence[Any]) -> tuple[list[str], list[ToolCall], list[Any]]:
    """The plain texts, the tool calls, and the skeleton that puts the blocks back together
    (``"t"`` for a plain text block, ``{"c": ...}`` for a tool call, ``{"b": ...}`` for any
    other block, kept whole)."""
    texts: list[str] = []
    calls: list[ToolCall] = []
    skeleton: list[Any] = []
    for block in blocks:
        kind = block.get("block_type")
        if kind == "text" and isinstance(block.get("text"), str) and len(block) == 2:
            texts.append(block["text"])
            skeleton.append("t")
        elif kind == "tool_call" and isinstance(block.get("tool_call_id"), str):
            kwargs = block.get("tool_kwargs")
            arguments = kwargs if isinstance(kwargs, str) else json.dumps(kwargs)
            calls.append(ToolCall(block["tool_call_id"], str(block.get("tool_name")), arguments))
            skeleton.append({"c": {**block, "tool_kwargs": isinstance(kwargs, str)}})
        else:
            skeleton.append({"b": block})
    return texts, calls, skeleton


def _kwarg_calls(extra: dict[str, Any]) -> list[ToolCall]:
    """The OpenAI-shaped ``tool_calls`` of ``additional_kwargs`` when every entry converts;
    what remains of them (their other keys) stays in ``extra``."""
    raw_calls = extra.get("tool_calls")
    if not isinstance(raw_calls, list):
        return []
    converted = [_openai_call(c) for c in raw_calls]
    if not converted or any(c is None for c in converted):
        return []
    extra["tool_calls"] = [{k: v for k, v in c.items() if k != "function"} for c in raw_calls]
    return [c for c in converted if c is not None]


def from_chat_message(message: ChatMessage) -> LlamaMessage:
    """The LlamaIndex message a stored message stands for (a new object on every call).

    Messages written by other code get one ``TextBlock`` (none for ``None`` content) and their
    tool calls as OpenAI-shaped ``additional_kwargs["tool_calls"]``.
    """
    meta_value = message.metadata.get(META)
    meta: Mapping[str, Any] = thaw(meta_value) if isinstance(meta_value, Mapping) else {}
    content = thaw(message.content)
    if isinstance(content, str):
        texts = [content]
    elif isinstance(content, list):
        texts = [str(p.get("text", "")) for p in content if isinstance(p, Mapping)]
    else:
        texts = []
    calls = list(message.tool_calls)
    block_calls = calls[: int(meta.get("block_calls", 0))]
    kwarg_calls = calls[len(block_calls) :]
    blocks: list[Any] = []
    text_iter, call_iter = iter(texts), iter(block_calls)
    for entry in meta.get("blocks", ["t"] * len(texts) if texts else []):
        if entry == "t":
            blocks.append({"block_type": "text", "text": next(text_iter, "")})
        elif "c" in entry:
            call = next(call_iter, None)
            if call is None:
                continue
            block = dict(entry["c"])
            as_string = block.pop("tool_kwargs")
            block["tool_kwargs"] = call.arguments if as_string else json.loads(call.arguments)
            block["tool_call_id"], block["tool_name"] = call.id, call.name
            blocks.append(block)
        else:
            blocks.append(entry["b"])
    extra: dict[str, Any] = dict(meta.get("kwargs", {}))
    if message.role == "tool" and not meta.get("no_call_id"):
        extra["tool_call_id"] = message.tool_call_id
    if kwarg_calls:
        shells = extra.get("tool_calls") or [{"id": c.id, "type": "function"} for c in kwarg_calls]
        extra["tool_calls"] = [
            {**shell, "id": c.id, "function": {"name": c.name, "arguments": c.arguments}}
            for shell, c in zip(shells, kwarg_calls, strict=False)
        ]
    data = {"role": meta.get("role", message.role), "additional_kwargs": extra, "blocks": blocks}
    return LlamaMessage.model_validate(data)


class LlamaIndexChatStore(BaseChatStore):
    """A chatlayers stack as a LlamaIndex ``BaseChatStore``.

    Args:
        stack: a ``ChatStorage``, or a :class:`~storage.sync.SyncChatStorage` whose portal the
            sync methods share.
        user_id: the user every chat-store key belongs to.
        agent_id: the agent id of every conversation (default ``"assistant"``).

    A chat-store key is a session id. ``get_keys`` needs a stack that can list its keys.

    Raises:
        InvalidMessageError: a message cannot be converted or stored (nothing is stored).
        InvalidKeyError: a key is empty or holds NUL.
        StorageUnavailableError: the stack's backend cannot be reached.
    """

    user_id: str
    agent_id: str = "assistant"
    _stack: Any = PrivateAttr()
    _sync: Any = PrivateAttr(default=None)

    def __init__(
        self, stack: ChatStorage | SyncChatStorage, *, user_id: str, agent_id: str = "assistant"
    ) -> None:
        super().__init__(user_id=user_id, agent_id=agent_id)  # type: ignore[call-arg]
        self._stack, self._sync = split_stack(stack)

    @classmethod
    def class_name(cls) -> str:
        return "LlamaIndexChatStore"

    @property
    def stack(self) -> ChatStorage:
        """The chatlayers stack."""
        stack: ChatStorage = self._stack
        return stack

    @property
    def sync(self) -> SyncChatStorage:
        """The portal the sync methods use (created on first use when not given)."""
        if self._sync is None:
            self._sync = SyncChatStorage(self._stack, close_stack=False)
        sync: SyncChatStorage = self._sync
        return sync

    def _key(self, key: str) -> ChatKey:
        return ChatKey(self.user_id, key, self.agent_id)

    # --- async (native) -----------------------------------------------------------------

    async def aget_messages(self, key: str) -> list[LlamaMessage]:
        """The conversation, oldest first (a summarizing stack's view)."""
        return [from_chat_message(m) for m in await self.stack.fetch(self._key(key))]

    async def async_add_message(
        self, key: str, message: LlamaMessage, idx: int | None = None
    ) -> None:
        """Append ``message``, or insert it at ``idx`` of the raw record (a rewrite).

        Raises:
            ConflictError: the record kept changing while it was edited (nothing stored).
        """
        chat_key = self._key(key)
        converted = to_chat_message(message)
        if idx is None:
            await self.stack.save_messages(chat_key, [converted])
            return
        await edit(self.stack, chat_key, lambda raw: insert(raw, idx, [converted]))

    async def aset_messages(self, key: str, messages: list[LlamaMessage]) -> None:
        """Make ``messages`` the whole conversation.

        When the stored record, or a summarizing stack's view of it (what ``get_messages``
        returned), is a prefix of ``messages`` (the memory re-setting what it had plus new
        turns) only the new messages are saved; otherwise the record is rewritten.

        Raises:
            ConflictError: the record kept changing while it was edited (nothing changed).
        """
        converted = [to_chat_message(m) for m in messages]
        chat_key = self._key(key)
        # A summarizing stack's view given back with new turns (``memory.set(memory.get_all()
        # + [...])``, an agent's ``chat_history=``): only the new turns are saved, the raw
        # record stays as it is and the summary is never stored in it.
        view = await self.stack.fetch(chat_key)
        served = len(view) if _starts_with(messages, view) else None
        if served is not None and not any(m.is_summary for m in view):
            served = None  # the whole record: the prefix check below covers it

        def change(raw: list[ChatMessage]) -> list[ChatMessage] | None:
            if served is not None:
                return [*raw, *converted[served:]] if len(converted) > served else None
            if _starts_with(messages, raw):
                return [*raw, *converted[len(raw) :]] if len(converted) > len(raw) else None
            return converted

        await edit(self.stack, chat_key, change)

    async def adelete_messages(self, key: str) -> list[LlamaMessage] | None:
        """Erase the conversation; return what it held (``None`` when it held nothing)."""
        chat_key = self._key(key)
        raw = await raw_history(self.stack, chat_key)
        if not raw:
            return None
        await self.stack.delete(chat_key)
        return [from_chat_message(m) for m in raw]

    async def _delete_one(
        self, key: str, pick: Callable[[list[ChatMessage]], int | None], *, newest: bool = False
    ) -> Any:
        # The message is picked on the first read and removed by id. A retry (another worker
        # wrote meanwhile) removes it only if it is still there; ``newest``: the newest
        # message still there of those the first read saw (another worker's delete of the
        # same one meanwhile means this call removes the next). What is returned is what this
        # call removed, never a message another worker's delete took.
        seen: list[set[str]] = []
        target: list[ChatMessage] = []
        removed: list[ChatMessage] = []

        def change(raw: list[ChatMessage]) -> list[ChatMessage] | None:
            removed.clear()
            if not seen:
                seen.append({m.id for m in raw})
                index = pick(raw)
                if index is None:
                    return None
                target.append(raw[index])
            if newest:
                found = [m for m in raw if m.id in seen[0]]
            else:
                found = [m for m in raw if m.id == target[0].id]
            if not found:
                return None
            removed.append(found[-1])
            return [m for m in raw if m.id != found[-1].id]

        await edit(self.stack, self._key(key), change)
        return from_chat_message(removed[0]) if removed else None

    async def adelete_message(self, key: str, idx: int) -> LlamaMessage | None:
        """Remove message ``idx`` of the raw record; ``None`` when out of range.

        Raises:
            ConflictError: the record kept changing while it was edited (nothing removed).
        """
        result: LlamaMessage | None = await self._delete_one(
            key, lambda raw: idx if 0 <= idx < len(raw) else None
        )
        return result

    async def adelete_last_message(self, key: str) -> LlamaMessage | None:
        """Remove the newest message of the raw record; ``None`` when there is none.

        Raises:
            ConflictError: the record kept changing while it was edited (nothing removed).
        """
        result: LlamaMessage | None = await self._delete_one(
            key, lambda raw: len(raw) - 1 if raw else None, newest=True
        )
        return result

    async def aget_keys(self) -> list[str]:
        """The user's session ids holding messages of this agent, sorted.

        Raises:
            ConfigError: the stack cannot list its keys.
        """
        return await agent_session_ids(self.stack, self.user_id, self.agent_id)

    # --- sync (through the portal) ------------------------------------------------------

    def get_messages(self, key: str) -> list[LlamaMessage]:
        """The conversation, oldest first (blocking)."""
        return [from_chat_message(m) for m in self.sync.fetch(self._key(key))]

    def add_message(self, key: str, message: LlamaMessage, idx: int | None = None) -> None:
        """Append (or insert at ``idx``) one message (blocking)."""
        self.sync.call(self.async_add_message, key, message, idx)

    def set_messages(self, key: str, messages: list[LlamaMessage]) -> None:
        """Make ``messages`` the whole conversation (blocking)."""
        self.sync.call(self.aset_messages, key, messages)

    def delete_messages(self, key: str) -> list[LlamaMessage] | None:
        """Erase the conversation (blocking)."""
        result: list[LlamaMessage] | None = self.sync.call(self.adelete_messages, key)
        return result

    def delete_message(self, key: str, idx: int) -> LlamaMessage | None:
        """Remove message ``idx`` (blocking)."""
        result: LlamaMessage | None = self.sync.call(self.adelete_message, key, idx)
        return result

    def delete_last_message(self, key: str) -> LlamaMessage | None:
        """Remove the newest message (blocking)."""
        result: LlamaMessage | None = self.sync.call(self.adelete_last_message, key)
        return result

    def get_keys(self) -> list[str]:
        """The user's session ids (blocking)."""
        result: list[str] = self.sync.call(self.aget_keys)
        return result


def _starts_with(messages: Sequence[LlamaMessage], stored: Sequence[ChatMessage]) -> bool:
    """Whether ``messages`` begin with ``stored`` (as LlamaIndex messages)."""
    return len(stored) <= len(messages) and all(
        from_chat_message(s) == given for s, given in zip(stored, messages, strict=False)
    )


async def agent_session_ids(stack: ChatStorage, user_id: str, agent_id: str) -> list[str]:
    """The sessions of ``user_id`` holding messages of ``agent_id``, sorted (LlamaIndex's
    chat-store keys).

    Raises:
        ConfigError: the stack cannot list its keys.
    """
    from storage.abilities import ListableStorage, find_ability
    from storage.errors import ConfigError

    listable = find_ability(stack, ListableStorage)
    if listable is None:
        raise ConfigError("get_keys needs a stack that can list its keys (list_keys)")
    keys = await listable.list_keys(user_id)
    return sorted({k.session_id for k in keys if k.agent_id == agent_id})

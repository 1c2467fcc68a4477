"""OpenAI Agents SDK adapter: a chatlayers stack as the SDK's ``Session``.

The SDK (https://github.com/openai/openai-agents-python, ``agents.memory.session.Session``)
stores Responses API input items. Mapping to ``ChatMessage``, lossless (the tests round-trip
every item shape the SDK produces):

- a ``message`` item (``{"role", "content"}``, with or without ``"type": "message"``) of role
  user, system or developer becomes one message of that role (``developer`` is kept as
  ``system``); its content stays as given (a string, or the parts verbatim);
- the items of one assistant step — an assistant message, its ``function_call`` items and any
  item the chat format has no field for (``reasoning``, built-in tool calls, ...) — become one
  assistant message: the text as content, each ``function_call`` as a ``ToolCall``
  (``call_id``, ``name``, ``arguments`` kept as the exact string), so parallel calls form one
  valid chat turn;
- a ``function_call_output`` item becomes a ``tool`` message (``tool_call_id`` = ``call_id``).

Everything else an item holds (``id``, ``status``, ``type``, key order, whole items without a
chat equivalent) is kept in ``metadata["openai_agents"]`` and restored exactly; a message
whose items are the plain default shapes carries no metadata at all. Texts of messages, call
arguments and tool outputs live in the message fields, so a scrubbing layer sees them; items
kept whole in metadata (reasoning summaries, built-in tool calls) are stored as given.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Final, TypeVar, TypeVarTuple, cast

import anyio
import attrs

from storage.adapters import missing_extra, split_stack
from storage.adapters.rewrite import edit
from storage.errors import InvalidMessageError, StorageUnavailableError
from storage.message import ChatKey, ChatMessage, ToolCall, new_message_id, thaw
from storage.protocol import ChatStorage
from storage.sync import SyncChatStorage

try:
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra("the OpenAI Agents SDK", "openai-agents", exc) from exc

__all__ = ["OpenAIAgentsSession", "items_to_messages", "message_to_items"]

META: Final = "openai_agents"
Item = dict[str, Any]
T = TypeVar("T")
Ts = TypeVarTuple("Ts")

# Skeleton kinds: "m" message item, "c" function_call, "o" an item kept whole.
# A skeleton is the item with the fields the ChatMessage holds replaced by None, so the
# item's keys and their order survive.
_CALL_FIELDS: Final = ("call_id", "name", "arguments")


def _kind(item: Mapping[str, Any]) -> str:
    kind = item.get("type")
    if kind in (None, "message") and isinstance(item.get("role"), str):
        return "message"
    if kind == "function_call" and all(isinstance(item.get(f), str) for f in _CALL_FIELDS):
        return "call"
    if (
        kind == "function_call_output"
        and isinstance(item.get("call_id"), str)
        and item["call_id"]
        and isinstance(item.get("output"), str | list)
    ):
        return "output"
    return "opaque"


def _skeleton(item: Mapping[str, Any], mapped: Sequence[str]) -> dict[str, Any]:
    return {k: (None if k in mapped else thaw(v)) for k, v in item.items()}


def _content(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _restore_content(value: Any) -> Any:
    return thaw(value) if isinstance(value, tuple) else value


class _Group:
    """The items of one assistant step, becoming one assistant ``ChatMessage``."""

    def __init__(self) -> None:
        self.items: list[Mapping[str, Any]] = []
        self.skeletons: list[dict[str, Any]] = []
        self.content: Any = None
        self.has_message = False
        self.calls: list[ToolCall] = []

    def add_message(self, item: Mapping[str, Any]) -> None:
        self.items.append(item)
        self.content = _content(item.get("content"))
        self.has_message = True
        self.skeletons.append({"k": "m", "i": _skeleton(item, ("role", "content"))})

    def add_call(self, item: Mapping[str, Any]) -> None:
        self.items.append(item)
        self.calls.append(ToolCall(item["call_id"], item["name"], item["arguments"]))
        self.skeletons.append({"k": "c", "i": _skeleton(item, _CALL_FIELDS)})

    def add_opaque(self, item: Mapping[str, Any]) -> None:
        self.items.append(item)
        self.skeletons.append({"k": "o", "i": thaw(item)})

    def message(self) -> ChatMessage:
        message = ChatMessage("assistant", self.content, self.calls)
        return _finish(message, self.items, self.skeletons)


def _finish(
    message: ChatMessage, items: Sequence[Mapping[str, Any]], skeletons: list[dict[str, Any]]
) -> ChatMessage:
    """Attach the skeletons unless the default rendering already gives ``items`` back."""
    if message_to_items(message) == [thaw(item) for item in items]:
        return message
    return attrs.evolve(message, metadata={META: {"items": skeletons}})


def items_to_messages(items: Sequence[Mapping[str, Any]]) -> list[ChatMessage]:
    """Convert Responses input items to chat messages (see the module docstring).

    Raises:
        InvalidMessageError: an item is not a mapping.
    """
    out: list[ChatMessage] = []
    group: _Group | None = None

    def close() -> None:
        nonlocal group
        if group is not None:
            out.append(group.message())
            group = None

    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise InvalidMessageError(
                f"item {index}: a session item must be a dict, got {type(item).__name__}"
            )
        kind = _kind(item)
        role = item.get("role")
        if kind == "message" and role == "assistant":
            if group is None or group.has_message or group.calls:
                close()
                group = _Group()
            group.add_message(item)
        elif kind == "message" and role in ("user", "system", "developer"):
            close()
            chat_role = "system" if role == "developer" else str(role)
            mapped = ("content",) if role == "developer" else ("role", "content")
            skeleton = _skeleton(item, mapped)
            message = ChatMessage(chat_role, _content(item.get("content")))
            out.append(_finish(message, [item], [{"k": "m", "i": skeleton}]))
        elif kind == "call":
            if group is None:
                group = _Group()
            group.add_call(item)
        elif kind == "output":
            close()
            message = ChatMessage("tool", _content(item["output"]), tool_call_id=item["call_id"])
            skeleton = _skeleton(item, ("call_id", "output"))
            out.append(_finish(message, [item], [{"k": "t", "i": skeleton}]))
        else:
            if group is None:
                group = _Group()
            group.add_opaque(item)
    close()
    return out


def _default_items(message: ChatMessage) -> list[Item]:
    content = _restore_content(message.content)
    if message.role == "tool":
        output = "" if content is None else content
        call_id = message.tool_call_id
        return [{"type": "function_call_output", "call_id": call_id, "output": output}]
    items: list[Item] = []
    if message.role != "assistant" or content not in (None, "") or not message.tool_calls:
        items.append({"role": message.role, "content": "" if content is None else content})
    items.extend(
        {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}
        for c in message.tool_calls
    )
    return items


def _fill(skeleton: Mapping[str, Any], values: Mapping[str, Any]) -> Item:
    item: Item = {}
    for k, v in skeleton.items():
        item[k] = values[k] if v is None and k in values else thaw(v)
    return item


def message_to_items(message: ChatMessage) -> list[Item]:
    """The Responses input items a stored message stands for (new objects on every call).

    Messages written by other code (no ``metadata["openai_agents"]``) get the default shapes:
    ``{"role", "content"}``, ``function_call`` and ``function_call_output`` items.
    """
    meta = message.metadata.get(META)
    skeletons = meta.get("items") if isinstance(meta, Mapping) else None
    if not skeletons:
        return _default_items(message)
    content = _restore_content(message.content)
    calls = iter(message.tool_calls)
    items: list[Item] = []
    for entry in skeletons:
        kind, skeleton = entry["k"], entry["i"]
        if kind == "m":
            items.append(_fill(skeleton, {"role": message.role, "content": content}))
        elif kind == "c":
            call = next(calls, None)
            if call is None:
                continue  # the message lost a call (edited by other code): skip its slot
            values: dict[str, Any] = {
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
            }
            items.append(_fill(skeleton, values))
        elif kind == "t":
            values = {"call_id": message.tool_call_id, "output": content}
            items.append(_fill(skeleton, values))
        else:
            items.append(thaw(skeleton))
    items.extend(
        {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}
        for c in calls
    )
    return items


class _ThreadSafeLock:
    """A lock shared by every thread and event loop (anyio's lock binds to one loop).

    Taken without blocking the loop: at once when free, else in a worker thread; a caller
    cancelled while waiting never leaves it held.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()

    async def __aenter__(self) -> None:
        if self._lock.acquire(blocking=False):
            return
        taken: list[bool] = []

        def take() -> None:
            self._lock.acquire()
            taken.append(True)

        try:
            await anyio.to_thread.run_sync(take)
        except BaseException:
            if taken:
                self._lock.release()
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self._lock.release()


class OpenAIAgentsSession:
    """A chatlayers stack as an OpenAI Agents SDK ``Session`` for one conversation.

    Implements the SDK's ``Session`` protocol (``agents.memory.Session``): ``session_id``,
    ``session_settings``, ``get_items``, ``add_items``, ``pop_item``, ``clear_session``; and
    ``close()``, like the SDK's ``SQLiteSession``.

    Args:
        stack: any ``ChatStorage``, or a :class:`~storage.sync.SyncChatStorage` whose portal
            runs every call (then one session may be used from any thread and event loop).
        key: the conversation; ``session_id`` is ``key.session_id``.
        session_settings: the SDK's ``SessionSettings`` or a dict of its fields (``{"limit":
            20}``), coerced as the SDK's own sessions do; its ``limit`` is the default for
            ``get_items``.
        close_stack: whether :meth:`close` also closes ``stack`` (default ``False``: the
            stack is the caller's).

    ``get_items`` reads the stack's ``fetch`` (a summarizing stack's buffer), so the SDK's
    model sees the summarized history. ``pop_item`` works on the raw history and rewrites the
    conversation under the version it read (:func:`storage.adapters.rewrite.edit`: a message
    another worker appends meanwhile is kept): with a stack that has ``ReplaceableStorage``
    (every built-in store) in one atomic ``replace``, crash-safe; otherwise delete, then save
    what remains (a crash between the two loses the conversation). Calls on one session
    object are serialized by a lock that every thread and event loop share, so one session
    may serve ``Runner.run_sync`` calls from a thread pool; with a stack whose connections
    belong to one event loop (Redis, PostgreSQL), pass a ``SyncChatStorage`` for that.

    Raises:
        InvalidMessageError: an item cannot be stored (nothing of the batch is stored).
        StorageUnavailableError: the stack's backend cannot be reached, or the session is
            closed.
    """

    session_id: str
    session_settings: SessionSettings | None

    def __init__(
        self,
        stack: ChatStorage | SyncChatStorage,
        key: ChatKey,
        *,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        close_stack: bool = False,
    ) -> None:
        self.stack, self._sync = split_stack(stack)
        self.key = key
        self.session_id = key.session_id
        self.session_settings = (
            SessionSettings()
            if session_settings is None
            else coerce_session_settings(cast("Any", session_settings))
        )
        self.close_stack = close_stack
        self._lock = _ThreadSafeLock()
        self._closed = False

    async def _run(self, func: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
        """``await func(*args)``: on the caller's loop, or on the portal's when given one."""
        if self._closed:
            raise StorageUnavailableError(f"the session of {self.key} is closed")
        sync = self._sync
        if sync is None:
            return await func(*args)
        return await anyio.to_thread.run_sync(partial(sync.call, func, *args))

    async def _items(self, limit: int | None) -> list[TResponseInputItem]:
        messages = await self._run(partial(self.stack.fetch, self.key, limit=limit))
        return [cast("TResponseInputItem", i) for m in messages for i in message_to_items(m)]

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The newest ``limit`` items (all when ``None``), oldest first.

        ``limit`` defaults to ``session_settings.limit``; ``0`` returns ``[]`` and a negative
        limit returns everything, as the SDK's ``SQLiteSession`` does.
        """
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and limit == 0:
            return []
        async with self._lock:
            if limit is None or limit < 0:
                return await self._items(None)
            # One stored message holds one item or more, so the newest `limit` messages
            # normally cover the newest `limit` items; a short or tool-led window falls back
            # to all.
            items = await self._items(limit)
            if len(items) < limit:
                items = await self._items(None)
            return items[-limit:]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store the items as one atomic batch.

        Raises:
            InvalidMessageError: an item is not a dict or holds data that is not JSON.
        """
        messages = items_to_messages(cast("list[Mapping[str, Any]]", items))
        if not messages:
            return
        async with self._lock:
            await self._run(self.stack.save_messages, self.key, messages)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item, or ``None`` when the session is empty.

        The raw record is rewritten without that item: one atomic ``replace`` when the stack
        has :class:`~storage.abilities.ReplaceableStorage`, else delete then save.

        Raises:
            ConflictError: the record kept changing while it was edited (nothing removed).
        """
        async with self._lock:
            return await self._run(self._pop)

    async def _pop(self) -> TResponseInputItem | None:
        # A retry (another worker wrote meanwhile) pops the newest item of the messages the
        # first read saw that are still there, as they are now: never a message that landed
        # in between, and never an item another pop already took (two pops, two items).
        seen: list[set[str]] = []
        popped: list[Item] = []

        def change(raw: list[ChatMessage]) -> list[ChatMessage] | None:
            popped.clear()
            if not seen:
                seen.append({m.id for m in raw})
            index = next((n for n in reversed(range(len(raw))) if raw[n].id in seen[0]), None)
            if index is None:
                return None
            last = raw[index]
            items = message_to_items(last)
            if items:
                popped.append(items.pop())
            # What remains of the message keeps its id and time.
            rest = [
                attrs.evolve(
                    m, id=last.id if n == 0 else new_message_id(), created_at=last.created_at
                )
                for n, m in enumerate(items_to_messages(items))
            ]
            return [*raw[:index], *rest, *raw[index + 1 :]]

        await edit(self.stack, self.key, change)
        return cast("TResponseInputItem", popped[0]) if popped else None

    async def clear_session(self) -> None:
        """Erase the conversation."""
        async with self._lock:
            await self._run(self.stack.delete, self.key)

    def close(self) -> None:
        """Close the session (idempotent); later calls raise ``StorageUnavailableError``.

        Closes the stack too when ``close_stack`` (a ``SyncChatStorage`` with its portal).
        Call it from synchronous code (a blocking call, like ``SQLiteSession.close``).
        """
        if self._closed:
            return
        self._closed = True
        if not self.close_stack:
            return
        if self._sync is not None:
            self._sync.close()
        else:
            SyncChatStorage(self.stack).close()

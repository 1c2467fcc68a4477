"""LlamaIndex ``Memory`` adapter: a chatlayers stack as an ``AsyncDBChatStore``.

LlamaIndex's current memory class, ``Memory`` (``ChatMemoryBuffer`` is deprecated in its
favour), keeps a session's messages in an ``AsyncDBChatStore``: a FIFO queue of *active*
messages whose oldest are *archived* when the token limit is reached (and handed to its
memory blocks). One line plugs a chatlayers stack in::

    memory = Memory.from_defaults(session_id="s1", chat_store=LlamaIndexMemoryStore(stack,
                                  user_id="u1"))

A session is ``ChatKey(user_id, session_id, agent_id)``; messages convert as in
:mod:`storage.adapters.llama_index` (lossless). The raw record holds every message, oldest
first; the archived ones are its oldest ``n``, and ``n`` is kept as an application record
(:class:`~storage.abilities.ConversationRecord` of kind ``"llama_index.archived"``) when the
stack has :class:`~storage.abilities.RecordStorage` (every built-in store), else in this
process only. Archiving therefore writes one small record and rewrites nothing; deleting
messages rewrites the record (one atomic ``replace`` where the stack has it) under the
version read (:func:`storage.adapters.rewrite.edit`): a message another worker appends
meanwhile is never erased; the edit reads again and re-applies itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from storage.abilities import ConversationRecord, RecordStorage, find_ability
from storage.adapters import missing_extra
from storage.adapters.llama_index import agent_session_ids, from_chat_message, to_chat_message
from storage.adapters.rewrite import edit, insert, raw_history
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage

try:
    from llama_index.core.base.llms.types import ChatMessage as LlamaMessage
    from llama_index.core.storage.chat_store.base_db import AsyncDBChatStore, MessageStatus
    from pydantic import PrivateAttr
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra("llama-index-core", "llama-index", exc) from exc

__all__ = ["ARCHIVED_KIND", "LlamaIndexMemoryStore"]

ARCHIVED_KIND: Final = "llama_index.archived"


class LlamaIndexMemoryStore(AsyncDBChatStore):
    """A chatlayers stack as the ``chat_store`` of LlamaIndex's ``Memory``.

    Args:
        stack: any ``ChatStorage``.
        user_id: the user every session belongs to.
        agent_id: the agent id of every conversation (default ``"assistant"``).

    ``delete_message(key, idx)`` takes the message's position in the whole record (LlamaIndex's
    SQL store takes its row id). ``get_keys`` needs a stack that can list its keys.

    Raises:
        InvalidMessageError: a message cannot be converted or stored (nothing is stored).
        StorageUnavailableError: the stack's backend cannot be reached.
    """

    user_id: str
    agent_id: str = "assistant"
    _stack: Any = PrivateAttr()
    _archived: dict[ChatKey, int] = PrivateAttr(default_factory=dict)

    def __init__(self, stack: ChatStorage, *, user_id: str, agent_id: str = "assistant") -> None:
        super().__init__(user_id=user_id, agent_id=agent_id)  # type: ignore[call-arg]
        self._stack = stack

    @classmethod
    def class_name(cls) -> str:
        return "LlamaIndexMemoryStore"

    @property
    def stack(self) -> ChatStorage:
        """The chatlayers stack."""
        stack: ChatStorage = self._stack
        return stack

    def _key(self, key: str) -> ChatKey:
        return ChatKey(self.user_id, key, self.agent_id)

    # --- the archived count -------------------------------------------------------------

    async def _count(self, key: ChatKey) -> int:
        records = find_ability(self.stack, RecordStorage)
        if records is not None:
            found = await records.fetch_records(key, kind=ARCHIVED_KIND)
            return int(found[-1].data.get("count", 0)) if found else 0
        return self._archived.get(key, 0)

    async def _load(self, key: ChatKey) -> tuple[list[ChatMessage], int]:
        raw = await raw_history(self.stack, key)
        return raw, max(0, min(await self._count(key), len(raw)))

    async def _set_archived(self, key: ChatKey, count: int) -> None:
        records = find_ability(self.stack, RecordStorage)
        if records is not None:
            await records.save_record(key, ConversationRecord(ARCHIVED_KIND, {"count": count}))
        else:
            self._archived[key] = count

    async def _remove(
        self, key: ChatKey, pick: Callable[[list[ChatMessage], int], list[ChatMessage]]
    ) -> list[ChatMessage]:
        """Remove the messages ``pick(record, archived)`` names (chosen on the first read,
        removed by id) under the record's version; keep the archived count right."""
        archived = await self._count(key)
        gone: list[ChatMessage] = []
        removed: list[ChatMessage] = []  # what this call removed: not what another took
        was_archived: list[int] = []

        def change(raw: list[ChatMessage]) -> list[ChatMessage] | None:
            removed.clear()
            if not gone:
                count = max(0, min(archived, len(raw)))
                gone.extend(pick(raw, count))
                positions = {m.id: n for n, m in enumerate(raw)}
                was_archived.append(sum(positions[m.id] < count for m in gone))
            ids = {m.id for m in gone}
            kept = [m for m in raw if m.id not in ids]
            removed.extend(m for m in raw if m.id in ids)
            return kept if removed else None

        record = await edit(self.stack, key, change)
        if removed:
            left = len(record) - len(removed)
            if left > 0:
                await self._set_archived(key, max(0, min(archived, len(record)) - was_archived[0]))
            else:
                self._archived.pop(key, None)
        return removed

    @staticmethod
    def _select(
        raw: list[ChatMessage], archived: int, status: MessageStatus | None
    ) -> list[ChatMessage]:
        if status == MessageStatus.ACTIVE:
            return raw[archived:]
        if status == MessageStatus.ARCHIVED:
            return raw[:archived]
        return raw

    # --- AsyncDBChatStore ---------------------------------------------------------------

    async def get_messages(
        self,
        key: str,
        status: MessageStatus | None = MessageStatus.ACTIVE,
        limit: int | None = None,
        offset: int | None = None,
    ) -> list[LlamaMessage]:
        """The session's messages of ``status`` (``None``: all), oldest first."""
        raw, archived = await self._load(self._key(key))
        selected = self._select(raw, archived, status)[offset or 0 :]
        if limit is not None:
            selected = selected[:limit]
        return [from_chat_message(m) for m in selected]

    async def count_messages(
        self, key: str, status: MessageStatus | None = MessageStatus.ACTIVE
    ) -> int:
        """How many messages of ``status`` the session holds."""
        raw, archived = await self._load(self._key(key))
        return len(self._select(raw, archived, status))

    async def add_message(
        self, key: str, message: LlamaMessage, status: MessageStatus = MessageStatus.ACTIVE
    ) -> None:
        """Append one message (an archived one joins the archived prefix)."""
        await self.add_messages(key, [message], status)

    async def add_messages(
        self,
        key: str,
        messages: list[LlamaMessage],
        status: MessageStatus = MessageStatus.ACTIVE,
    ) -> None:
        """Append ``messages`` as one atomic batch."""
        chat_key = self._key(key)
        batch = [to_chat_message(m) for m in messages]
        if not batch:
            return
        if status != MessageStatus.ARCHIVED:
            await self.stack.save_messages(chat_key, batch)
            return
        archived = await self._count(chat_key)
        record = await edit(
            self.stack, chat_key, lambda raw: insert(raw, min(archived, len(raw)), batch)
        )
        await self._set_archived(chat_key, min(archived, len(record)) + len(batch))

    async def set_messages(
        self,
        key: str,
        messages: list[LlamaMessage],
        status: MessageStatus = MessageStatus.ACTIVE,
    ) -> None:
        """Replace the session with ``messages``, all of ``status``."""
        chat_key = self._key(key)
        batch = [to_chat_message(m) for m in messages]
        await edit(self.stack, chat_key, lambda raw: batch)
        if batch:
            await self._set_archived(
                chat_key, len(batch) if status == MessageStatus.ARCHIVED else 0
            )
        else:
            self._archived.pop(chat_key, None)

    async def delete_message(self, key: str, idx: int) -> LlamaMessage | None:
        """Remove the message at position ``idx`` of the whole record; ``None`` if none.

        Raises:
            ConflictError: the record kept changing while it was edited (nothing removed).
        """
        gone = await self._remove(
            self._key(key), lambda raw, _: raw[idx : idx + 1] if 0 <= idx < len(raw) else []
        )
        return from_chat_message(gone[0]) if gone else None

    async def delete_messages(self, key: str, status: MessageStatus | None = None) -> None:
        """Remove the session's messages of ``status`` (``None``: the whole conversation)."""
        chat_key = self._key(key)
        if status is None:
            await self.stack.delete(chat_key)
            self._archived.pop(chat_key, None)
            return
        if status == MessageStatus.ACTIVE:
            await self._remove(chat_key, lambda raw, archived: raw[archived:])
        else:
            await self._remove(chat_key, lambda raw, archived: raw[:archived])

    async def delete_oldest_messages(self, key: str, n: int) -> list[LlamaMessage]:
        """Remove the ``n`` oldest active messages and return them."""
        gone = await self._remove(
            self._key(key), lambda raw, archived: raw[archived : archived + max(0, n)]
        )
        return [from_chat_message(m) for m in gone]

    async def archive_oldest_messages(self, key: str, n: int) -> list[LlamaMessage]:
        """Archive the ``n`` oldest active messages and return them (one small record)."""
        chat_key = self._key(key)
        raw, archived = await self._load(chat_key)
        moved = raw[archived : archived + max(0, n)]
        if moved:
            await self._set_archived(chat_key, archived + len(moved))
        return [from_chat_message(m) for m in moved]

    async def get_keys(self) -> list[str]:
        """The user's session ids holding messages of this agent, sorted.

        Raises:
            ConfigError: the stack cannot list its keys.
        """
        return await agent_session_ids(self.stack, self.user_id, self.agent_id)

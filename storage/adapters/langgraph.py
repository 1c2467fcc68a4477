"""LangGraph adapter: a checkpointer that keeps a thread's messages in a chatlayers stack.

LangChain 1.x keeps an agent's conversation with LangGraph persistence: ``create_agent(...,
checkpointer=...)`` and a ``thread_id`` in the run config (its docs deprecate
``RunnableWithMessageHistory`` for this). One line makes that memory a chatlayers stack,
scrubbed and summarized::

    agent = create_agent(model, tools, checkpointer=ChatlayersCheckpointer(stack))
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "t1", "user_id": "u1"}})

The thread's ``messages`` channel lives in the stack under ``ChatKey(user_id, thread_id,
agent_id)`` (``user_id`` from the run config's ``configurable``, else the constructor's):
every checkpoint saves the messages the stack has not seen (by LangChain message id, so a
message is stored once), and a run starts from the stack's view (a summarizing stack's
summary and newest turns; scrubbed text under a scrubbing layer). An older checkpoint
(``get_state_history``, time travel) holds the ids of its messages and reads them back from
the stack's record. The rest
of a checkpoint (other channels, versions, pending writes) is small graph bookkeeping, kept by
``inner`` (default ``InMemorySaver``; pass a persistent saver to resume interrupted runs
across restarts). Without a checkpoint in ``inner`` (a new process), a thread that has
messages in the stack starts from them. Messages convert with the LangChain adapter
(:mod:`storage.adapters.langchain`), lossless for human, AI, system and tool messages.

Subgraph checkpoints (a non-empty ``checkpoint_ns``) pass to ``inner`` unchanged.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Final

from storage.adapters import missing_extra
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage
from storage.sync import SyncChatStorage

try:
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        empty_checkpoint,
    )
    from langgraph.checkpoint.memory import InMemorySaver

    from storage.adapters.langchain import from_chat_message, to_chat_message
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra("langgraph", "langgraph", exc) from exc

__all__ = ["ChatlayersCheckpointer"]

CHANNEL: Final = "messages"
_MARK: Final = "chatlayers"


def _is_summary(message: BaseMessage) -> bool:
    mark = message.response_metadata.get(_MARK)
    return isinstance(mark, dict) and bool(mark.get("summary"))


def _to_langchain(message: ChatMessage) -> BaseMessage:
    converted = from_chat_message(message)
    if message.is_summary:
        # Marked where no model provider reads it, so the next checkpoint does not store the
        # summary as if it were a new message of the thread.
        converted.response_metadata = {**converted.response_metadata, _MARK: {"summary": True}}
    return converted


class ChatlayersCheckpointer(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer whose threads' messages live in a chatlayers stack.

    Args:
        stack: any ``ChatStorage`` (``summarize::scrub::sqlite:///chats.db`` for the full
            treatment).
        user_id: the user of a thread whose run config has no ``configurable.user_id``.
        agent_id: the agent id of every thread's conversation.
        channel: the state channel holding the messages (``"messages"`` in ``create_agent``).
        inner: the saver for the rest of each checkpoint (default a new ``InMemorySaver``).

    Raises:
        InvalidMessageError: a message cannot be converted or stored.
        StorageUnavailableError: the stack's backend cannot be reached.
    """

    def __init__(
        self,
        stack: ChatStorage | SyncChatStorage,
        *,
        user_id: str = "default",
        agent_id: str = "agent",
        channel: str = CHANNEL,
        inner: BaseCheckpointSaver[Any] | None = None,
    ) -> None:
        self.inner: BaseCheckpointSaver[Any] = inner if inner is not None else InMemorySaver()
        super().__init__(serde=self.inner.serde)
        if isinstance(stack, SyncChatStorage):
            self._sync: SyncChatStorage | None = stack
            self.stack: ChatStorage = stack.stack
        else:
            self._sync = None
            self.stack = stack
        self.user_id = user_id
        self.agent_id = agent_id
        self.channel = channel
        self._known: dict[ChatKey, set[str]] = {}
        self._lock = threading.Lock()

    @property
    def sync(self) -> SyncChatStorage:
        """The portal the sync methods use (created on first use when not given)."""
        if self._sync is None:
            sync = SyncChatStorage(self.stack, close_stack=False)
            weakref.finalize(self, sync.close)
            self._sync = sync
        return self._sync

    def _key(self, config: RunnableConfig, request: RunnableConfig | None = None) -> ChatKey | None:
        """The conversation of ``config``'s thread (``None`` for a subgraph); the user comes
        from ``config``, else from the ``request`` it answers, else the constructor."""
        configurable = config.get("configurable") or {}
        if configurable.get("checkpoint_ns", ""):
            return None
        thread_id = configurable.get("thread_id")
        if thread_id is None:
            return None
        asked = (request or {}).get("configurable") or {}
        user_id = configurable.get("user_id", asked.get("user_id", self.user_id))
        return ChatKey(str(user_id), str(thread_id), self.agent_id)

    def _remember(self, key: ChatKey, ids: Sequence[str]) -> None:
        with self._lock:
            self._known.setdefault(key, set()).update(ids)

    async def _view(self, key: ChatKey) -> list[BaseMessage]:
        stored = await self.stack.fetch(key)
        self._remember(key, [m.id for m in stored])
        return [_to_langchain(m) for m in stored]

    def _with_messages(self, tup: CheckpointTuple, messages: list[BaseMessage]) -> CheckpointTuple:
        values = dict(tup.checkpoint["channel_values"])
        if self.channel not in values:
            return tup
        values[self.channel] = list(messages)
        checkpoint: Checkpoint = {**tup.checkpoint, "channel_values": values}
        return tup._replace(checkpoint=checkpoint)

    async def _at_checkpoint(self, key: ChatKey, tup: CheckpointTuple) -> CheckpointTuple:
        """An older checkpoint: its own messages, looked up by the ids it kept (time travel
        and ``get_state_history`` see each step's messages, as stored)."""
        ids = tup.checkpoint["channel_values"].get(self.channel)
        if not isinstance(ids, list):
            return tup
        entries = await self.stack.fetch_all_chats(key.user_id, key.session_id)
        stored = {e.message.id: e.message for e in entries if e.agent_id == key.agent_id}
        messages = [_to_langchain(stored[i]) for i in ids if isinstance(i, str) and i in stored]
        return self._with_messages(tup, messages)

    # --- async (native) -----------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint of ``config`` with the thread's messages read from the stack.

        The thread's latest checkpoint (no ``checkpoint_id`` in ``config``: what a run starts
        from) gets the stack's view, summarized and scrubbed as the stack makes it; a named
        older checkpoint gets the stored messages it held.
        """
        tup = await self.inner.aget_tuple(config)
        key = self._key(config)
        if key is None:
            return tup
        if tup is not None and (config.get("configurable") or {}).get("checkpoint_id"):
            return await self._at_checkpoint(key, tup)
        view = await self._view(key)
        if tup is not None:
            return self._with_messages(tup, view)
        if not view or (config.get("configurable") or {}).get("checkpoint_id"):
            return None
        # A new process: the thread starts from what the stack holds.
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {self.channel: view}
        checkpoint["channel_versions"] = {self.channel: self.get_next_version(None, None)}
        thread = {
            "thread_id": key.session_id,
            "checkpoint_ns": "",
            "checkpoint_id": checkpoint["id"],
        }
        metadata: CheckpointMetadata = {"source": "input", "step": -1, "parents": {}}
        return CheckpointTuple({"configurable": thread}, checkpoint, metadata, None, [])

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """The inner saver's checkpoints, newest first, each with the messages it held."""
        async for tup in self.inner.alist(config, filter=filter, before=before, limit=limit):
            key = self._key(tup.config, config)
            yield tup if key is None else await self._at_checkpoint(key, tup)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Save the thread's new messages to the stack (one atomic batch), the rest to
        ``inner``; the inner checkpoint keeps only the message ids."""
        key = self._key(config)
        messages = checkpoint["channel_values"].get(self.channel)
        if key is None or not isinstance(messages, list):
            return await self.inner.aput(config, checkpoint, metadata, new_versions)
        with self._lock:
            known = set(self._known.get(key, ()))
        batch = [
            to_chat_message(m)
            for m in messages
            if isinstance(m, BaseMessage) and m.id not in known and not _is_summary(m)
        ]
        if batch:
            stored = await self.stack.save_messages(key, batch)
            self._remember(key, [m.id for m in batch] + [m.id for m in stored])
        values = dict(checkpoint["channel_values"])
        values[self.channel] = [getattr(m, "id", None) for m in messages]
        slim: Checkpoint = {**checkpoint, "channel_values": values}
        return await self.inner.aput(config, slim, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Pending writes of an unfinished step: kept by ``inner`` as given."""
        await self.inner.aput_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Erase the thread: its checkpoints in ``inner`` and its conversation (of the
        constructor's ``user_id``) in the stack."""
        await self.inner.adelete_thread(thread_id)
        key = ChatKey(self.user_id, thread_id, self.agent_id)
        await self.stack.delete(key)
        with self._lock:
            self._known.pop(key, None)

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)

    # --- sync (through the portal) ------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        result: CheckpointTuple | None = self.sync.call(self.aget_tuple, config)
        return result

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> list[CheckpointTuple]:
            return [t async for t in self.alist(config, filter=filter, before=before, limit=limit)]

        yield from self.sync.call(collect)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        result: RunnableConfig = self.sync.call(
            self.aput, config, checkpoint, metadata, new_versions
        )
        return result

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.sync.call(self.aput_writes, config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        self.sync.call(self.adelete_thread, thread_id)

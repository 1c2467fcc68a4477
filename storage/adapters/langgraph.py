"""LangGraph adapter: a checkpointer that keeps a thread's messages in a chatlayers stack.

LangChain 1.x keeps an agent's conversation with LangGraph persistence: ``create_agent(...,
checkpointer=...)`` and a ``thread_id`` in the run config (its docs deprecate
``RunnableWithMessageHistory`` for this). One line makes that memory a chatlayers stack,
scrubbed and summarized::

    agent = create_agent(model, tools, checkpointer=ChatlayersCheckpointer(stack))
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "t1", "user_id": "u1"}})

The thread's ``messages`` channel lives in the stack under ``ChatKey(user_id, thread_id,
agent_id)`` (``user_id`` from the run config's ``configurable``, else the constructor's):
every checkpoint saves the messages the stack has not seen, once each (by LangChain id, or
for messages without one, as in an ``operator.add`` channel, by identity and position), and
a run starts from the stack's view (a summarizing stack's summary and newest turns; scrubbed
text under a scrubbing layer). Reducer edits read back as with LangGraph's ``InMemorySaver``:
a message removed (``RemoveMessage``, ``REMOVE_ALL_MESSAGES`` as ``SummarizationMiddleware``
uses) stays removed and one replaced by id reads back replaced, while the record itself stays
append-only (every message ever sent is kept; an edit writes a small state record, see
:mod:`storage.adapters.langgraph_state`, so other processes read the same channel). An older
checkpoint (``get_state_history``, time travel) holds the refs of its messages and reads them
back from the stack's record. The rest of a checkpoint (other channels, versions, pending
writes) is small graph bookkeeping, kept by ``inner`` (default ``InMemorySaver``; pass a
persistent saver to resume interrupted runs across restarts), except the messages of pending
writes (an unfinished step's answers and tool results): they go to the stack as records, through
its layers, and ``inner`` keeps a reference (:mod:`storage.adapters.langgraph_writes`).
Without a checkpoint in ``inner`` (a new process), a thread that has messages in the stack
starts from them.
Messages convert with the LangChain adapter (:mod:`storage.adapters.langchain`), lossless for
human, AI, system and tool messages.

Subgraph checkpoints (a non-empty ``checkpoint_ns``) pass to ``inner`` unchanged.
"""

from __future__ import annotations

import copy
import threading
import weakref
from collections.abc import AsyncIterator, Collection, Iterator, Sequence
from types import TracebackType
from typing import Any, Final, Self

import anyio

from storage.abilities import ConversationRecord, RecordStorage, find_ability
from storage.adapters import missing_extra
from storage.errors import ConfigError
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

    from storage.adapters.langgraph_state import (
        Channel,
        Known,
        is_message_channel,
        match,
        project,
        to_langchain,
    )
    from storage.adapters.langgraph_writes import Carried
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra("langgraph", "langgraph", exc) from exc

__all__ = ["ChatlayersCheckpointer"]

CHANNEL: Final = "messages"


class ChatlayersCheckpointer(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer whose threads' messages live in a chatlayers stack.

    Args:
        stack: any ``ChatStorage`` (``summarize::scrub::sqlite:///chats.db`` for the full
            treatment).
        user_id: the user of a thread whose run config has no ``configurable.user_id``.
        agent_id: the agent id of every thread's conversation.
        channel: the state channel holding the messages (``"messages"`` in ``create_agent``).
        inner: the saver for the rest of each checkpoint (default a new ``InMemorySaver``).
            The messages in its pending writes are kept in the stack (see
            :mod:`storage.adapters.langgraph_writes`), so the stack must keep records
            (``RecordStorage``) unless ``inner`` is an ``InMemorySaver``.

    ``with``/``async with`` enter and leave ``inner`` too; leaving stops the portal the sync
    methods started (the stack itself stays open: it is the caller's).

    Raises:
        ConfigError: ``inner`` is not an ``InMemorySaver`` and the stack keeps no records.
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
            self._own_sync = False
            self.stack: ChatStorage = stack.stack
        else:
            self._sync = None
            self._own_sync = True
            self.stack = stack
        self.user_id = user_id
        self.agent_id = agent_id
        self.channel = channel
        self._channel = Channel(self.stack)
        records = find_ability(self.stack, RecordStorage)
        if records is None and type(self.inner) is not InMemorySaver:
            raise ConfigError(
                f"ChatlayersCheckpointer: the stack ({type(self.stack).__name__}) keeps no "
                f"records, so the pending writes of the {channel!r} channel (whole messages) "
                f"would reach {type(self.inner).__name__} unscrubbed; use a stack whose store "
                "keeps records (every built-in store does) or the default in-memory inner saver"
            )
        self._carried = Carried(records, channel)
        self._lock = threading.Lock()

    @property
    def sync(self) -> SyncChatStorage:
        """The portal the sync methods use (created on first use when not given)."""
        with self._lock:
            if self._sync is None:
                sync = SyncChatStorage(self.stack, close_stack=False)
                weakref.finalize(self, sync.close)
                self._sync = sync
            return self._sync

    def with_allowlist(
        self, extra_allowlist: Collection[tuple[str, ...]]
    ) -> ChatlayersCheckpointer:
        """A shallow clone whose serde, and its inner saver's, allow ``extra_allowlist``
        (LangGraph calls it when it compiles a graph with a checkpointer)."""
        inner = self.inner.with_allowlist(extra_allowlist)
        if inner is self.inner:
            return self
        clone = copy.copy(self)
        clone.inner = inner
        clone.serde = inner.serde
        return clone

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

    def _remember(self, key: ChatKey, known: Known) -> None:
        with self._lock:
            self._channel.remember(key, known)

    async def _latest(self, key: ChatKey, tup: CheckpointTuple | None) -> list[BaseMessage]:
        """The thread's channel now: the stack's view (summarized, scrubbed) of the messages
        the graph holds (see :mod:`storage.adapters.langgraph_state`)."""
        view = await self.stack.fetch(key)
        if self._channel.keeps_edits():
            refs = await self._channel.stored_refs(key)
        else:
            kept = tup.checkpoint["channel_values"].get(self.channel) if tup else None
            refs = [r for r in kept if isinstance(r, str)] if isinstance(kept, list) else None
        chosen = view if refs is None else project(view, refs)
        objects = [to_langchain(m) for m in chosen]
        self._remember(key, Known(objects, [m.id for m in chosen]))
        return objects

    def _with_messages(self, tup: CheckpointTuple, messages: list[BaseMessage]) -> CheckpointTuple:
        values = dict(tup.checkpoint["channel_values"])
        if self.channel not in values or not isinstance(values[self.channel], list):
            return tup
        values[self.channel] = list(messages)
        checkpoint: Checkpoint = {**tup.checkpoint, "channel_values": values}
        return tup._replace(checkpoint=checkpoint)

    async def _stored(self, key: ChatKey) -> dict[str, ChatMessage]:
        entries = await self.stack.fetch_all_chats(key.user_id, key.session_id)
        return {e.message.id: e.message for e in entries if e.agent_id == key.agent_id}

    def _at_checkpoint(
        self, tup: CheckpointTuple, stored: dict[str, ChatMessage]
    ) -> CheckpointTuple:
        """An older checkpoint: its own messages, looked up by the refs it kept (time travel
        and ``get_state_history`` see each step's messages, as stored)."""
        refs = tup.checkpoint["channel_values"].get(self.channel)
        if not isinstance(refs, list):
            return tup
        messages = [to_langchain(stored[r]) for r in refs if isinstance(r, str) and r in stored]
        return self._with_messages(tup, messages)

    # --- async (native) -----------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint of ``config`` with the thread's messages read from the stack.

        The thread's latest checkpoint (no ``checkpoint_id`` in ``config``: what a run starts
        from) gets the stack's view of the messages the graph holds, summarized and scrubbed
        as the stack makes it; a named older checkpoint gets the stored messages it held.
        """
        tup = await self.inner.aget_tuple(config)
        key = self._key(config)
        if key is None:
            return tup
        if tup is not None:
            tup = await self._carried.read(key, tup)
        named = bool((config.get("configurable") or {}).get("checkpoint_id"))
        if named:
            return None if tup is None else self._at_checkpoint(tup, await self._stored(key))
        latest = await self._latest(key, tup)
        if tup is not None:
            return self._with_messages(tup, latest)
        if not latest:
            return None
        # A new process: the thread starts from what the stack holds.
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {self.channel: latest}
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
        stored: dict[ChatKey, dict[str, ChatMessage]] = {}
        carried: dict[ChatKey, dict[str, ConversationRecord]] = {}
        async for tup in self.inner.alist(config, filter=filter, before=before, limit=limit):
            key = self._key(tup.config, config)
            if key is None:
                yield tup
                continue
            if key not in stored:
                stored[key] = await self._stored(key)
            yield self._at_checkpoint(await self._carried.read(key, tup, carried), stored[key])

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Save the thread's new messages to the stack (one atomic batch), the rest to
        ``inner``; the inner checkpoint keeps only the refs of the messages (and references
        to the input and pending ``Send`` values, kept as stack records).

        An update that is not a pure append (a message removed, replaced or moved) also
        writes a state record, so every process reads the channel the graph holds.
        """
        key = self._key(config)
        if key is None:
            return await self.inner.aput(config, checkpoint, metadata, new_versions)
        ns = str((config.get("configurable") or {}).get("checkpoint_ns", ""))
        values = await self._carried.put_values(key, (ns,), checkpoint["channel_values"])
        messages = values.get(self.channel)
        if is_message_channel(messages):
            with self._lock:
                base = self._channel.get(key)
            if base is None:
                await self._latest(key, None)
                with self._lock:
                    base = self._channel.get(key) or Known([], [])
            refs, batch = match(messages, base)
            if batch:
                await self.stack.save_messages(key, batch)
            if refs[: len(base.refs)] != base.refs:
                await self._channel.save_refs(key, refs)
            self._remember(key, Known(list(messages), refs))
            values[self.channel] = refs
        slim: Checkpoint = {**checkpoint, "channel_values": values}
        return await self.inner.aput(config, slim, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Pending writes of an unfinished step: those of the messages channel go to the
        stack (one record per call, through its layers), ``inner`` keeps a reference to
        each; the rest ``inner`` keeps as given."""
        key = self._key(config)
        if key is not None:
            configurable = config.get("configurable") or {}
            where = (
                str(configurable.get("checkpoint_ns", "")),
                str(configurable.get("checkpoint_id", "")),
                task_id,
                task_path,
            )
            writes = await self._carried.put_writes(key, where, writes)
        await self.inner.aput_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Erase the thread: its checkpoints in ``inner`` and its conversation (of the
        constructor's ``user_id``) in the stack."""
        await self.inner.adelete_thread(thread_id)
        key = ChatKey(self.user_id, thread_id, self.agent_id)
        await self.stack.delete(key)
        with self._lock:
            self._channel.forget(key)

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)

    # --- context managers ---------------------------------------------------------------

    def _close_portal(self) -> None:
        with self._lock:
            sync, own = self._sync, self._own_sync
            if own:
                self._sync = None
        if own and sync is not None:
            sync.close()

    def __enter__(self) -> Self:
        enter = getattr(self.inner, "__enter__", None)
        if enter is not None:
            enter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            leave = getattr(self.inner, "__exit__", None)
            if leave is not None:
                leave(exc_type, exc, tb)
        finally:
            self._close_portal()

    async def __aenter__(self) -> Self:
        enter = getattr(self.inner, "__aenter__", None)
        if enter is not None:
            await enter()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            leave = getattr(self.inner, "__aexit__", None)
            if leave is not None:
                await leave(exc_type, exc, tb)
        finally:
            # Stopping a portal waits for its thread: not on the event loop.
            await anyio.to_thread.run_sync(self._close_portal)

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

"""``SummarizingChatStorage``: short histories for the model, the raw record untouched.

The contract of agent-squad's ``SummarizingChatStorage``, made safe (DESIGN.md §5):

1. Before a key is active, reads and writes are pure delegation.
2. The first ``fetch`` whose raw history has more than ``trigger_at * 2`` messages calls
   ``summarizer(history, keep_last)``; the result becomes the key's in-memory buffer. The inner
   store is never written by summarizing. A concurrent fetch waits and gets the same buffer.
   If activation fails, the key stays cold and the next qualifying fetch tries again.
3. Once active, a save stores the raw messages first, then appends what the inner store
   returned (scrubbed, not the raw input) to the buffer, and summarizes at once when the buffer
   holds more than ``trigger_at * 2`` messages. Fetch reads the buffer and honours ``limit``.
4. ``fetch_all_chats`` always reads the inner store; ``delete``/``delete_user`` drop buffers.
5. One summarizer call at a time per key; saves landing meanwhile are kept after its result.
6. A failing (or timed-out) summarizer loses nothing: the buffer keeps every message, the error
   propagates as ``SummarizerError`` (original as ``__cause__``) and the next trigger retries.
7. A result with invalid roles, an orphaned tool result, or without the last ``keep_last``
   turns verbatim raises ``SummarizerError``; the buffer stays as it was.
8. Buffers are bounded (``max_buffers``, least recently used go cold). Buffers do not see saves
   made through another process or stack instance until they go cold (a known limit).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import anyio

from storage.errors import ChatStorageError, SummarizerError
from storage.history import check_tool_pairs, last_turns_start, safe_window, validate_message
from storage.message import ChatKey, ChatMessage, check_key_part
from storage.protocol import ChatStorage, ChatStorageWrapper

if TYPE_CHECKING:
    from summarizers.types import ChatSummarizer

__all__ = ["SummarizingChatStorage"]


class _KeyState:
    """The buffer of one key and its single-flight lock."""

    __slots__ = ("buffer", "lock", "pending", "summarizing")

    def __init__(self) -> None:
        self.buffer: list[ChatMessage] | None = None  # None: cold
        self.lock = anyio.Lock()
        self.summarizing = False
        self.pending: list[ChatMessage] = []  # stored while a summarizer call runs


class SummarizingChatStorage(ChatStorageWrapper):
    """Serve a summarized in-memory view of long histories; the inner store keeps everything.

    Args:
        inner: the wrapped store (often a scrubbing layer over a base store).
        summarizer: ``async (buffer, keep_last) -> new buffer``; default
            ``summarizers.ExtractiveSummarizer()`` (offline, deterministic).
        trigger_at: summarize when a history holds more than ``trigger_at * 2`` messages
            (``trigger_at`` message pairs). Must be >= 1.
        keep_last: turns kept verbatim after the summary (a turn is a user message and
            everything up to the next user message). Must be >= 0.
        max_buffers: active buffers kept in memory; the least recently used go cold.
        timeout: seconds one summarizer call may take (``None``: no limit); a timeout is a
            failure (rule 6).

    Attributes:
        summaries_made: summarizer calls that produced a new (shorter) buffer since construction.
        summary_failures: failed or refused summarizer calls since construction.

    Raises:
        ValueError: on construction, for a bad ``trigger_at``, ``keep_last`` or ``max_buffers``.
        SummarizerError: from the ``save`` or ``fetch`` that triggered a failing summarizer.
    """

    def __init__(
        self,
        inner: ChatStorage,
        summarizer: ChatSummarizer | None = None,
        *,
        trigger_at: int = 20,
        keep_last: int = 2,
        max_buffers: int = 10_000,
        timeout: float | None = None,
    ) -> None:
        super().__init__(inner)
        if trigger_at < 1:
            raise ValueError(f"trigger_at must be >= 1, got {trigger_at}")
        if keep_last < 0:
            raise ValueError(f"keep_last must be >= 0, got {keep_last}")
        if max_buffers < 1:
            raise ValueError(f"max_buffers must be >= 1, got {max_buffers}")
        if summarizer is None:
            from summarizers.extractive import ExtractiveSummarizer

            summarizer = ExtractiveSummarizer()
        self.summarizer = summarizer
        self.trigger_at = trigger_at
        self.keep_last = keep_last
        self.max_buffers = max_buffers
        self.timeout = timeout
        self._threshold = trigger_at * 2
        self._states: OrderedDict[ChatKey, _KeyState] = OrderedDict()
        self.summaries_made = 0
        self.summary_failures = 0

    # --- reads ---------------------------------------------------------------------------

    def is_active(self, key: ChatKey) -> bool:
        """True when ``key`` is served from its in-memory buffer."""
        state = self._states.get(key)
        return state is not None and state.buffer is not None

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        state = self._states.get(key)
        if state is not None and state.buffer is not None:
            self._states.move_to_end(key)
            return safe_window(state.buffer, limit)
        raw = await self.inner.fetch(key)
        if len(raw) <= self._threshold:
            return safe_window(raw, limit)
        state = self._state(key)
        async with state.lock:
            if state.buffer is None:
                # Re-read under the lock (saves may have landed while we waited); saves that
                # land from here on are collected in ``pending`` and kept after the result.
                state.summarizing = True
                state.pending = []
                try:
                    raw = await self.inner.fetch(key)
                except BaseException:
                    state.summarizing = False
                    raise
                if len(raw) <= self._threshold:
                    state.summarizing = False
                    return safe_window(raw, limit)
                await self._summarize(state, raw)
            assert state.buffer is not None
            return safe_window(state.buffer, limit)

    # --- writes --------------------------------------------------------------------------

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        stored = await self.inner.save(key, message)
        return await self._after_save(key, stored)

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        stored = await self.inner.save_messages(key, messages)
        return await self._after_save(key, stored)

    async def _after_save(self, key: ChatKey, stored: list[ChatMessage]) -> list[ChatMessage]:
        state = self._states.get(key)
        if state is None or not stored:
            return stored
        if state.summarizing:
            state.pending.extend(stored)
        if state.buffer is None:
            return stored  # cold (or activating: the activation adds the pending messages)
        state.buffer.extend(stored)
        self._states.move_to_end(key)
        if len(state.buffer) > self._threshold and not state.summarizing:
            async with state.lock:
                buffer = state.buffer
                if buffer is not None and len(buffer) > self._threshold:
                    state.summarizing = True
                    state.pending = []
                    await self._summarize(state, list(buffer))
        return stored

    # --- summarizing ---------------------------------------------------------------------

    async def _summarize(self, state: _KeyState, source: list[ChatMessage]) -> None:
        """Run the summarizer on ``source``; called with ``state.lock`` held and
        ``state.summarizing`` already set (so no save can slip between snapshot and call)."""
        accepted: list[ChatMessage] | None = None
        try:
            try:
                if self.timeout is None:
                    result = await self.summarizer(list(source), self.keep_last)
                else:
                    with anyio.fail_after(self.timeout):
                        result = await self.summarizer(list(source), self.keep_last)
            except TimeoutError as exc:
                raise SummarizerError(
                    f"summarizer timed out after {self.timeout} s; no message was lost"
                ) from exc
            except SummarizerError:
                raise
            except Exception as exc:
                raise SummarizerError(
                    f"summarizer failed ({type(exc).__name__}: {exc}); no message was lost"
                ) from exc
            self._check_result(result, source)
            accepted = result
        except BaseException:
            self.summary_failures += 1
            raise
        finally:
            state.summarizing = False
            pending, state.pending = state.pending, []
            if accepted is not None:
                seen = {m.id for m in source}
                state.buffer = list(accepted) + [m for m in pending if m.id not in seen]
                if accepted != source:  # an unchanged buffer: nothing could be summarized
                    self.summaries_made += 1
                self._evict()
            # On failure an active buffer already holds source + pending; a cold key stays cold.

    def _check_result(self, result: object, source: list[ChatMessage]) -> None:
        """Rule 7: refuse a result that breaks the summary rules (raise ``SummarizerError``)."""
        if not isinstance(result, list):
            raise SummarizerError(f"summarizer must return a list, got {type(result).__name__}")
        try:
            for index, message in enumerate(result):
                validate_message(message, index)
            check_tool_pairs(result)
        except ChatStorageError as exc:
            raise SummarizerError(f"summarizer returned an invalid history: {exc}") from exc
        # A leading prior summary is not a turn, whatever its role.
        body = source[1:] if source and source[0].is_summary else source
        kept = body[last_turns_start(body, self.keep_last) :]
        if kept and result[-len(kept) :] != kept:
            raise SummarizerError(
                f"summarizer result does not end with the last {self.keep_last} turns verbatim "
                f"({len(kept)} messages)"
            )

    # --- buffers -------------------------------------------------------------------------

    def _state(self, key: ChatKey) -> _KeyState:
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = _KeyState()
        self._states.move_to_end(key)
        return state

    def _evict(self) -> None:
        """Drop least recently used buffers beyond ``max_buffers`` (never one in use)."""
        excess = len(self._states) - self.max_buffers
        if excess <= 0:
            return
        for key in list(self._states):
            if excess <= 0:
                break
            state = self._states[key]
            if not state.summarizing and not state.lock.locked():
                del self._states[key]
                excess -= 1

    async def delete(self, key: ChatKey) -> None:
        self._states.pop(key, None)
        await self.inner.delete(key)

    async def delete_user(self, user_id: str) -> None:
        check_key_part("user_id", user_id)
        for key in [k for k in self._states if k.user_id == user_id]:
            del self._states[key]
        await self.inner.delete_user(user_id)

    def describe(self) -> str:
        summarizer = getattr(self.summarizer, "describe", None)
        what = summarizer() if callable(summarizer) else type(self.summarizer).__name__
        return (
            f"SummarizingChatStorage(trigger_at={self.trigger_at}, keep_last={self.keep_last}, "
            f"max_buffers={self.max_buffers}, summarizer={what})"
        )

"""``SummarizingChatStorage``: short views of long histories; the raw record untouched.

The contract of agent-squad's ``SummarizingChatStorage``, made safe (DESIGN.md §5):

1. Before a key is summarized, it reads and writes like the inner store.
2. The first ``fetch`` whose history has more than ``trigger_at * 2`` messages calls
   ``summarizer(history, keep_last)``. A concurrent fetch waits for that call and returns the
   same view. If it fails, the key stays cold and the next qualifying fetch tries again.
3. Once a key's view is cached, a save stores the raw messages first, then appends what the
   inner store returned (scrubbed, not the raw input) to the view, and summarizes at once
   when the view holds more than ``trigger_at * 2`` messages. Fetch serves the view.
4. ``fetch_all_chats`` always reads the inner store; ``delete``/``delete_user`` drop views.
5. One summarizer call at a time per key; saves landing meanwhile are kept after its result.
6. A failing (or timed-out) summarizer loses nothing: ``on_error="raise"`` propagates
   ``SummarizerError`` (original as ``__cause__``) and the next trigger retries;
   ``on_error="fallback"`` serves the last view and retries with backoff (:mod:`.policy`).
7. A result with invalid roles, an orphaned tool result, or without the last ``keep_last``
   turns verbatim raises ``SummarizerError``; the view stays as it was.
8. Per-key state is bounded (``max_buffers``, least recently used go cold), always.
9. The record and the view: the raw record is append-only and never written by summarizing.
   With ``summaries="store"`` a summary is a checkpoint stored beside the record (through
   every layer below), and the view is ``checkpoint + raw messages after it``; the in-memory
   view is only a cache of that, so a restarted or another worker serves the same view with
   no summarizer call. ``coherence="store"`` checks the key's head on every fetch of a
   cached key; a fleet makes one summarizer call per threshold crossing (a lease, then a
   compare-and-set of the checkpoint). ``summaries="memory"`` is the seed's behaviour: views
   live in this process only and do not see other instances' saves.

Agent traffic (issue 13): budgets in tokens (``trigger_tokens``/``keep_tokens``, or
``trigger_fraction`` of ``model``'s context window), long turns compressed by tool-call groups
(:mod:`.cutting`), old tool output trimmed without a model (``trim_tool_results``), summaries
made in the background (``background=True``), and a view that only grows at its end between
compactions, with its leading system prompt pinned first (``view_version`` says when the
prefix changed).
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, cast

import anyio
import attrs
from anyio.abc import TaskGroup

from storage.abilities import (
    Abilities,
    CheckpointStorage,
    DescribableStorage,
    ListableStorage,
    RecordStorage,
    ReplaceableStorage,
    RetentionStorage,
    SearchableStorage,
    SequencedStorage,
    SessionListing,
    SummaryCheckpoint,
    find_ability,
)
from storage.errors import (
    ConfigError,
    ConflictError,
    InvalidArgumentError,
    InvalidMessageError,
    SummarizerError,
)
from storage.history import last_turns_start
from storage.layers.summarizing import fleet, memory
from storage.layers.summarizing.calling import describe_summarizer, run_summarizer
from storage.layers.summarizing.cutting import (
    Cut,
    Work,
    mark_verbatim,
    opener_before,
    pinned_prompt,
    plan_cut,
    view_form,
)
from storage.layers.summarizing.header import header_messages
from storage.layers.summarizing.hold import with_hold, without_hold
from storage.layers.summarizing.options import check_numbers, token_trigger
from storage.layers.summarizing.policy import OnError, Policy
from storage.layers.summarizing.projection import (
    mark_summary,
    serve,
    split_result,
    start_right,
    summary_message,
)
from storage.layers.summarizing.state import KeyState, KeyStates
from storage.layers.summarizing.trimming import trim_tool_results
from storage.message import INSTRUCTION_ROLES, ChatKey, ChatMessage, check_key_part
from storage.protocol import ChatStorage, ChatStorageWrapper

if TYPE_CHECKING:
    from summarizers.types import ChatSummarizer

__all__ = ["SummarizingChatStorage"]

log = logging.getLogger("storage.layers.summarizing")

Summaries = Literal["store", "memory"]
Coherence = Literal["store", "process"]
SummaryRole = Literal["system", "user", "assistant", "developer"]


def _check_limit(limit: object) -> int | None:
    if limit is None:
        return None
    if type(limit) is not int or limit < 0:
        raise InvalidArgumentError(f"limit must be an int >= 0 or None, got {limit!r}")
    return limit


class SummarizingChatStorage(ChatStorageWrapper):
    """Serve a summarized view of long histories; the inner store keeps every raw message.

    Args:
        inner: the wrapped store (often a scrubbing layer over a base store).
        summarizer: ``async (view, keep_last) -> new view``; default
            ``summarizers.ExtractiveSummarizer()`` (offline, deterministic).
        trigger_at: summarize when a view holds more than ``trigger_at * 2`` messages
            (``trigger_at`` message pairs). Must be >= 1. Default 20, unless a token budget
            is given: a token budget replaces the pair budget (giving both is a
            ``ConfigError``).
        keep_last: turns kept verbatim after the summary (a turn is a user message and
            everything up to the next user message). Must be >= 0.
        trigger_tokens: token budget: summarize when the view holds more than this many
            tokens (``summarizers.count_tokens`` for ``model``, counted once per message).
        keep_tokens: token budget: at most this many tokens of the newest material stay
            verbatim after a summary (whole turns, or whole tool-call groups inside a long
            turn; always at least the newest one). Default ``trigger_tokens // 4``.
        trigger_fraction: token budget as a fraction (0 < F <= 1) of ``model``'s context
            window: ``context_window`` when given, else litellm's bundled model data
            (offline).
        context_window: ``model``'s context window in tokens, for a model litellm does not
            know (``hosted_vllm/…``, ``ollama/…``); only with ``trigger_fraction``.
        model: the model whose tokenizer counts tokens (default ``"gpt-4o"``).
        trim_tool_results: trim tool results longer than this many characters (>= 20) that
            are older than the last ``trim_keep_turns`` turns to head + tail + a marker, in
            the view only, at compaction points, before any summary is made (no model call
            when trimming alone brings the view under the budget). ``None``: off.
        trim_keep_turns: turns whose tool results are never trimmed (default 2, >= 0).
        background: a save returns once the raw write is done; summaries are made in a task
            group the layer owns: enter it with ``async with layer:`` (or
            ``async with layer.background_tasks():``) before use.
        max_buffers: keys whose view is kept in memory; the least recently used go cold.
        timeout: seconds one summarizer call may take (``None``: no limit); a timeout is a
            failure (rule 6).
        summaries: ``"store"``: summaries are checkpoints in the store (shared by every
            instance, kept across restarts); ``"memory"``: in this process only (the seed's
            behaviour). ``None`` (default): ``"store"`` when every component of ``inner``
            has the ``CheckpointStorage`` ability, else ``"memory"``.
        coherence: with ``summaries="store"``: ``"store"`` (default) reads the key's head on
            every fetch of a cached key, so saves, checkpoints and deletes made through any
            instance or process are seen; ``"process"`` reads it at most once per
            ``process_recheck`` seconds, for deployments that pin each conversation to one
            process.
        process_recheck: with ``coherence="process"``: the most seconds (of ``clock``) a
            cached key is served without reading its head, so an erasure (``delete``,
            ``delete_user``), a ``replace`` or a purge made through another process stops
            being served within that bound (default 1 s; ``None``: never read, only for
            conversations no other process ever erases). Must be > 0.
        on_error: ``"raise"`` (default): a summarizer failure propagates as
            ``SummarizerError`` from the save or fetch that triggered it; ``"fallback"``:
            save and fetch never fail because of the summarizer (see :mod:`.policy`).
        lease_ttl: seconds a worker holds a key's summarizing lease (a worker that dies
            holding it loses it after that); default ``timeout + 30``, or 300 without a
            timeout. Must be > 0.
        retry_backoff: ``on_error="fallback"``: seconds before the first retry of a failed
            summary, doubled after each failure in a row. Must be >= 0.
        retry_max: largest retry delay in seconds. Must be >= ``retry_backoff``.
        summary_role: role of the message ``compact(key, summary="...")`` makes (a
            summarizer's own messages keep the role it gives them). ``"system"`` (default) or
            ``"developer"``: merged into the view's one leading message after the pinned
            prompt, accepted by every strict template. ``"user"``: a separate user message
            after the prompt; Mistral templates refuse it before the next user message (two
            user turns in a row) unless a ``strict::`` layer merges them. ``"assistant"``: a
            separate assistant message; Mistral templates refuse a conversation opening with
            an assistant turn.
        clock: monotonic seconds for the backoff (injected in tests); default
            ``time.monotonic``.

    Attributes:
        summaries_made: summaries this instance made and installed since construction.
        summary_failures: failed or refused summarizer calls since construction.
        lease_busy: summaries skipped because another worker held the key's lease.
        checkpoint_conflicts: checkpoints another writer replaced first (compare-and-set lost).
        checkpoints_loaded: cold keys served from a stored checkpoint (no summarizer call).
        summarizer_calls: calls of the summarizer since construction.
        trims_made: compactions made by trimming alone (no summarizer call).
        saves_triggering: saves that found the view due and started (or, in background
            mode, scheduled) a compaction.

    Summarizer calls: a compaction brings the view down to about the keep budget, and a key
    whose view could not be brought under the trigger is held until ``trigger - keep`` more
    arrived or a new turn starts (:mod:`.policy`; the hold is stored in the checkpoint, so
    every instance and a restarted worker decide alike), so a history of ``n`` messages (or
    tokens) costs at most about ``n / (trigger - keep - s)`` calls plus one per turn that
    starts while the view is held, ``s`` the messages a compaction keeps besides the newest
    material (with a pair budget only a long turn's opening user message: the leading message
    is not counted; with tokens, the leading message too). The 600-pair agent turn with
    ``trigger_at=5``, 1,202 messages: at most ``1202 // (10 - 2 - 1) + 1 = 172`` calls, and a
    view of at most 10 messages after its leading one after every save. No call (and no
    lease) is made while no cut is possible.

    The view shows verbatim copies (the pinned system/developer prompt, a long turn's
    opening user message, trimmed tool results) exactly as the raw messages were (a trimmed
    one with only its ``trimmed_chars`` marker); only the summary message ``is_summary``.

    Raises:
        ConfigError: on construction (a ``ValueError`` too), for a bad ``trigger_at``,
            ``keep_last``, ``max_buffers``, ``timeout``, ``lease_ttl``, retry delay, budget
            or trimming option, each named; ``summaries="store"`` over a stack without the
            ``CheckpointStorage`` ability, or an unknown ``summaries``/``coherence``/
            ``on_error`` value.
        SummarizerError: from the ``save`` or ``fetch`` that triggered a failing summarizer
            (``on_error="raise"``; in background mode the failure is logged and counted).
        ConfigError: on construction, conflicting budgets (``trigger_at`` with a token
            budget, ``trigger_tokens`` with ``trigger_fraction``, ``keep_tokens`` without a
            token budget) or ``trigger_fraction`` for a model with no known context window
            and no ``context_window`` (the error names it); a ``save`` or ``fetch``
            of a ``background=True`` layer that was not entered (``async with layer:``),
            before anything is written.
    """

    # It consumes checkpoints (never offers them) and forwards the raw record's head and tail.
    abilities = Abilities(
        passes=(
            ListableStorage,
            SequencedStorage,
            SessionListing,
            SearchableStorage,
            RecordStorage,
        ),
        transforms=(DescribableStorage, ReplaceableStorage, RetentionStorage),
        hides=(CheckpointStorage,),
    )

    def __init__(
        self,
        inner: ChatStorage,
        summarizer: ChatSummarizer | None = None,
        *,
        trigger_at: int | None = None,
        keep_last: int = 2,
        max_buffers: int = 10_000,
        timeout: float | None = None,
        summaries: Summaries | None = None,
        coherence: Coherence = "store",
        on_error: OnError = "raise",
        lease_ttl: float | None = None,
        retry_backoff: float = 5.0,
        retry_max: float = 300.0,
        summary_role: SummaryRole = "system",
        clock: Callable[[], float] | None = None,
        trigger_tokens: int | None = None,
        keep_tokens: int | None = None,
        trigger_fraction: float | None = None,
        model: str | None = None,
        trim_tool_results: int | None = None,
        trim_keep_turns: int = 2,
        background: bool = False,
        context_window: int | None = None,
        process_recheck: float | None = 1.0,
    ) -> None:
        super().__init__(inner)
        if trigger_tokens is not None and trigger_fraction is not None:
            raise ConfigError("give trigger_tokens or trigger_fraction, not both")
        if trigger_fraction is not None:
            trigger_tokens = token_trigger(trigger_fraction, model, context_window)
        elif context_window is not None:
            raise ConfigError("context_window is for trigger_fraction; give both or neither")
        if trigger_tokens is not None:
            if trigger_at is not None:
                raise ConfigError("give trigger_at (pairs) or a token budget, not both")
        elif keep_tokens is not None:
            raise ConfigError(
                "keep_tokens needs a token budget (trigger_tokens or trigger_fraction)"
            )
        if keep_tokens is not None and not (
            trigger_tokens is not None and 0 < keep_tokens < trigger_tokens
        ):
            raise ConfigError(f"keep_tokens must be in (0, trigger_tokens), got {keep_tokens}")
        if trigger_tokens is None and trigger_at is None:
            trigger_at = 20
        check_numbers(
            trigger_at=trigger_at,
            trigger_tokens=trigger_tokens,
            keep_last=keep_last,
            trim_tool_results=trim_tool_results,
            trim_keep_turns=trim_keep_turns,
            max_buffers=max_buffers,
            timeout=timeout,
            lease_ttl=lease_ttl,
            process_recheck=process_recheck,
        )
        if retry_backoff < 0 or retry_max < retry_backoff:
            raise ConfigError(
                f"need 0 <= retry_backoff <= retry_max, got {retry_backoff} and {retry_max}"
            )
        for name, value, allowed in (
            ("summaries", summaries, (None, "store", "memory")),
            ("coherence", coherence, ("store", "process")),
            ("on_error", on_error, ("raise", "fallback")),
            ("summary_role", summary_role, ("system", "user", "assistant", "developer")),
        ):
            if value not in allowed:
                choices = ", ".join(repr(a) for a in allowed if a is not None)
                raise ConfigError(f"{name} must be one of {choices}, got {value!r}")
        store = find_ability(inner, CheckpointStorage)
        if summaries == "store" and store is None:
            raise ConfigError(
                "summaries='store' needs summary checkpoints, which this stack does not offer "
                f"(inner: {_describe(inner)}); use summaries='memory' for in-process summaries"
            )
        if summaries == "memory":
            store = None
        if summarizer is None:
            from summarizers.extractive import ExtractiveSummarizer

            summarizer = ExtractiveSummarizer()
        self.summarizer = summarizer
        self.trigger_at = trigger_at
        self.trigger_tokens = trigger_tokens
        self.keep_tokens = keep_tokens
        self.model = model or "gpt-4o"
        self.trim_tool_results = trim_tool_results
        self.trim_keep_turns = trim_keep_turns
        self.background = bool(background)
        self.keep_last = keep_last
        self.max_buffers = max_buffers
        self.timeout = timeout
        self.summaries: Summaries = "store" if store is not None else "memory"
        self._coherence: Coherence = coherence
        self._coherent = coherence == "store"
        self._clock = clock or time.monotonic
        self._recheck = None if self._coherent else process_recheck
        self.lease_ttl = (
            lease_ttl if lease_ttl is not None else (timeout + 30.0 if timeout else 300.0)
        )
        self.summary_role: SummaryRole = summary_role
        self._store: CheckpointStorage | None = store
        self._threshold: int | None = trigger_at * 2 if trigger_at is not None else None
        self._policy = Policy(
            self._threshold,
            on_error,
            clock or time.monotonic,
            retry_backoff,
            retry_max,
            trigger_tokens,
            keep_tokens,
        )
        self._counter: Any = None
        measure: Callable[[ChatMessage], int] | None = None
        if trigger_tokens is not None:
            from summarizers.tokens import TokenCounter

            counter = self._counter = TokenCounter(self.model)

            def measure(message: ChatMessage) -> int:
                marker = message.metadata.get("chatlayers")
                if marker and marker.get("trimmed_chars"):  # a trimmed copy keeps its id
                    return counter.count(message, f"{message.id}\x00trimmed")
                if marker and marker.get("summary"):  # a header keeps the prompt's id
                    return counter.count(message, f"{message.id}\x00{hash(message.text)}")
                return counter.count(message)

        # The newest window a view with no summary is served as (fallback, pair budget).
        self._window = self._threshold if self._fallback_window(on_error) else None
        self._states = KeyStates(max_buffers, measure)
        self._compaction_seq = itertools.count(1)  # memory mode's view versions
        self._tasks: TaskGroup | None = None
        self._group: Any = None
        self._running = 0
        self._idle = anyio.Event()
        self._fallback = on_error == "fallback"
        self._owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._summarizer_name = describe_summarizer(summarizer)
        self.summaries_made = 0
        self.summary_failures = 0
        self.lease_busy = 0
        self.checkpoint_conflicts = 0
        self.checkpoints_loaded = 0
        self.summarizer_calls = 0
        self.trims_made = 0
        self.saves_triggering = 0

    def _fallback_window(self, on_error: str) -> bool:
        return on_error == "fallback" and self._threshold is not None

    @property
    def coherence(self) -> Coherence:
        """``"store"`` or ``"process"`` (see the class docstring)."""
        return self._coherence

    @property
    def on_error(self) -> OnError:
        """``"raise"`` or ``"fallback"`` (see :mod:`storage.layers.summarizing.policy`)."""
        return self._policy.on_error

    # --- reads ---------------------------------------------------------------------------

    def view_version(self, key: ChatKey) -> str | None:
        """A version of ``key``'s cached view that changes only when its head (the summary
        part) is replaced: while it stays the same, every ``fetch`` returns the previous view
        as an exact prefix plus the new messages, so a provider's prompt cache keeps hitting.
        Cheap: no I/O. ``None`` when the key's view is not cached (fetch it first).

        Store mode: ``"<epoch>:<checkpoint version>"``; memory mode: ``"m:<n>"``, ``n`` a
        number this layer gives each compaction (``"m:0"``: the raw history, not summarized).
        """
        state = self._states.get(key)
        if self._store is None:
            return f"m:{state.compactions if state is not None and state.view else 0}"
        if state is None or state.view is None:
            return None
        epoch = state.head.epoch if state.head is not None else ""
        return f"{epoch}:{state.cp_version}"

    def is_active(self, key: ChatKey) -> bool:
        """True when ``key`` is served from its cached view."""
        state = self._states.get(key)
        return state is not None and state.view is not None

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        if self.background and self._tasks is None:
            self._not_entered()
        if self._store is None:
            return await self._fetch_memory(key, limit)
        if limit is not None:
            _check_limit(limit)
        store = self._store
        state = self._states.peek(key)
        if state is not None and state.view is not None:
            # The hot path: one head read, nothing changed, the view served from memory.
            self._states.bump(key)
            grew = False
            if self._coherent or (
                self._recheck is not None
                and self._clock() >= state.recheck_at
                and self._recheck_due(state)
            ):
                head = await store.head(key)
                known = state.head
                if (
                    known is None
                    or head.last_seq != known.last_seq
                    or head.epoch != known.epoch
                    or head.checkpoint_version != known.checkpoint_version
                ):
                    async with state.sync_lock:
                        grew = await fleet.read_back(store, key, state)
            if (grew or self._fallback) and self._policy.due(state):
                if self.background:
                    self._schedule(state, key)
                else:
                    await self._trigger(state, key, wait=False, activation=False)
            window = self._window
            if window is not None and state.n_summary == 0:
                return serve(state.view, limit, window)  # no summary yet: newest window
            return serve(state.view, limit, None)
        state = self._states.create(key)
        async with state.sync_lock:
            if state.view is None:
                await fleet.load(store, key, state)
                if state.checkpoint is not None:
                    self.checkpoints_loaded += 1
                if self._recheck is not None:
                    state.recheck_at = self._clock() + self._recheck
        if self._policy.due(state):
            if self.background:
                self._schedule(state, key)
            else:
                await self._trigger(state, key, wait=True, activation=True)
        return self._serve(state, limit)

    def _recheck_due(self, state: KeyState) -> bool:
        """``coherence="process"``: whether the cached key's head is due a read (at most once
        per ``process_recheck`` seconds), so another process's erasure reaches this one."""
        recheck = self._recheck
        if recheck is None:
            return False
        now = self._clock()
        if now < state.recheck_at:
            return False
        state.recheck_at = now + recheck
        return True

    def _serve(self, state: KeyState, limit: int | None) -> list[ChatMessage]:
        assert state.view is not None
        window = self._window if state.n_summary == 0 else None  # no summary: newest window
        return serve(state.view, limit, window)

    # --- writes --------------------------------------------------------------------------

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        if self.background and self._tasks is None:
            self._not_entered()
        generation = self._generation(key)
        stored = await self.inner.save(key, message)
        return await self._after_save(key, stored, generation)

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        if self.background and self._tasks is None:
            self._not_entered()
        generation = self._generation(key)
        stored = await self.inner.save_messages(key, messages)
        return await self._after_save(key, stored, generation)

    async def save_messages_if(
        self, key: ChatKey, messages: Sequence[ChatMessage], *, expected_version: str
    ) -> list[ChatMessage]:
        """``save_messages`` only if nobody wrote to the key since its head had
        ``expected_version`` (:class:`storage.abilities.ReplaceableStorage`).

        Raises:
            ConflictError: someone wrote since (nothing stored).
        """
        generation = self._generation(key)
        inner: Any = self.inner
        stored: list[ChatMessage] = await inner.save_messages_if(
            key, messages, expected_version=expected_version
        )
        return await self._after_save(key, stored, generation)

    async def replace(
        self,
        key: ChatKey,
        messages: Sequence[ChatMessage],
        *,
        expected_version: str | None = None,
    ) -> list[ChatMessage]:
        """Atomically replace the key's raw record (the store drops its checkpoint); the
        cached view is dropped, so the next fetch is built from the new record.

        Raises:
            InvalidMessageError: ``messages`` is not a valid history (nothing changed).
        """
        self._states.drop(key)
        inner: Any = self.inner
        try:
            result: list[ChatMessage] = await inner.replace(
                key, messages, expected_version=expected_version
            )
        finally:
            self._states.drop(key)
        return result

    def _generation(self, key: ChatKey) -> int:
        state = self._states.get(key)
        return -1 if state is None else state.generation

    async def _after_save(
        self, key: ChatKey, stored: list[ChatMessage], generation: int
    ) -> list[ChatMessage]:
        state = self._states.get(key)
        if state is None or not stored:
            return stored
        if state.summarizing and self._store is None:
            state.pending.extend(stored)  # memory mode: kept after the running call's result
        if state.view is None:
            return stored  # cold (or activating: the activation adds the pending messages)
        # A read-back that ran during the save may have brought these messages already.
        state.append(stored, dedupe=state.generation != generation)
        self._states.touch(key)
        if self._policy.due(state) and not state.summarizing:
            self.saves_triggering += 1
            if self.background:
                self._schedule(state, key)
            elif self._store is None:
                await self._resummarize_memory(state, key)
            else:
                await self._trigger(state, key, wait=False, activation=False)
        return stored

    # --- background summaries -------------------------------------------------------------

    def _not_entered(self) -> None:
        raise ConfigError(
            "background=True: enter the layer first (`async with layer:` or "
            "`async with layer.background_tasks():`), so it owns the task group its "
            "summaries run in"
        )

    def _schedule(self, state: KeyState, key: ChatKey) -> None:
        """Start a summary of ``key`` in the layer's task group (at most one per key)."""
        tasks = self._tasks
        if tasks is None:
            self._not_entered()
            return
        if state.scheduled:
            return
        state.scheduled = True
        self._running += 1
        tasks.start_soon(self._summarize_in_background, state, key)

    async def _summarize_in_background(self, state: KeyState, key: ChatKey) -> None:
        try:
            if self._store is None:
                await self._resummarize_memory(state, key)
            else:
                await self._trigger(state, key, wait=True, activation=False)
        except SummarizerError:
            pass  # counted and logged by the policy; the next trigger retries
        except Exception:  # a store error: nothing is lost, the next trigger retries
            log.exception("background summary of %r failed", key)
        finally:
            state.scheduled = False
            self._running -= 1
            if not self._running:
                self._idle.set()
                self._idle = anyio.Event()

    @asynccontextmanager
    async def background_tasks(self) -> AsyncIterator[Self]:
        """Own the task group background summaries run in for the block (without closing
        the store after it, unlike ``async with layer:``); summaries still running at its
        end are cancelled (nothing is lost: the raw record holds every message)."""
        if self._tasks is not None:
            raise ConfigError("this layer's background task group is already open")
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield self
            finally:
                self._tasks = None
                tasks.cancel_scope.cancel()

    async def drain(self) -> None:
        """Wait until no background summary is running (new ones may start after)."""
        while self._running:
            await self._idle.wait()

    async def __aenter__(self) -> Self:
        if self.background:
            if self._tasks is not None:
                raise ConfigError("this layer's background task group is already open")
            self._group = self.background_tasks()
            await self._group.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # --- summarizing: store mode -----------------------------------------------------------

    async def _trigger(
        self, state: KeyState, key: ChatKey, *, wait: bool, activation: bool
    ) -> None:
        """Make a summary of a due view, per the policy (store mode)."""
        if not self._policy.may_try(state) or (not wait and state.lock.locked()):
            return
        async with state.lock:
            if not self._policy.due(state) or not self._policy.may_try(state):
                return
            try:
                await self._summarize_store(state, key, force=False)
            except SummarizerError as exc:
                self.summary_failures += 1
                self._policy.failed(state, key, exc)
                if not self._policy.fallback:
                    if activation:
                        self._states.drop(key, state)  # cold: the next fetch tries again
                    raise
            else:
                self._policy.succeeded(state)

    async def _summarize_store(self, state: KeyState, key: ChatKey, *, force: bool) -> bool:
        """Summarize the key's view under its lease and store the checkpoint (called with
        ``state.lock`` held). Returns True when a new checkpoint was installed.

        Raises:
            SummarizerError: the summarizer failed or its result was refused.
            ConflictError: ``force`` and another worker holds the lease.
        """
        store = self._store
        assert store is not None
        if not force and not self._may_cut(state):
            return False  # every instance finds the same (a pure function of the view)
        async with fleet.lease(store, key, self._owner, self.lease_ttl) as held:
            if not held:
                self.lease_busy += 1
                if force:
                    raise ConflictError(
                        f"another worker is summarizing {key!r}; try again within "
                        f"{self.lease_ttl} s"
                    )
                return False
            async with state.sync_lock:
                await fleet.read_back(store, key, state)  # what others wrote, our seqs
                view = state.view
                assert view is not None
                assert state.head is not None
                if not force and not self._policy.due(state):
                    return False  # another worker summarized it meanwhile
                n_summary = state.n_summary
                n_tail = state.sequenced_len()
                seqs = cast(list[int], state.seqs[:n_tail])
                tail = view[n_summary : n_summary + n_tail]
                checkpoint = state.checkpoint
                covers = checkpoint.covers_to if checkpoint is not None else 0
                # The stored form (verbatim copies marked), its old hold left out.
                head = [without_hold(m) for m in checkpoint.messages] if checkpoint else []
                work = Work.build(head, tail, seqs, covers)
                base_version = state.cp_version
                epoch = state.head.epoch
            calls = self.summarizer_calls
            made = await self._compose(state, work)
            if made is None or (made[1] <= covers and made[0] == head):
                if self.summarizer_calls != calls:
                    # The summarizer kept everything: wait for new material (this process
                    # only: nothing was stored). Without a call every instance finds the
                    # same, so the stored hold stays the one that rules.
                    self._policy.settle(state)
                return False
            messages, covers_to, name = made
            # The hold is decided from what is stored (the checkpoint and the raw messages
            # after it), and stored with it, so every instance holds the key alike.
            kept = [m for m, seq in zip(tail, seqs, strict=True) if seq > covers_to]
            size = self._policy.measure(state, [*view_form(messages), *kept])
            hold = self._policy.hold_for(size, sum(1 for m in kept if m.role == "user"))
            messages = with_hold(messages, hold, state.unit)
            now = datetime.now(UTC)
            new = fleet.new_checkpoint(messages, covers_to, epoch, name, now)
            return await self._store_checkpoint(state, key, new, base_version)

    async def _compose(
        self, state: KeyState, work: Work
    ) -> tuple[list[ChatMessage], int, str] | None:
        """The next checkpoint for ``work``: ``(messages, covers_to, made by)``, or ``None``
        when nothing can be cut. Trimming first (no model call when it is enough), then a
        summary of whole turns, or of the older tool groups of a turn over the budget alone.

        Raises:
            SummarizerError: the summarizer failed or its result was refused.
        """
        policy = self._policy
        if self.trim_tool_results is not None:
            items = list(work.items)
            trimmed = trim_tool_results(
                items, keep_turns=self.trim_keep_turns, max_chars=self.trim_tool_results
            )
            if any(a is not b for a, b in zip(items, trimmed, strict=True)):
                cut = last_turns_start(items, self.trim_keep_turns)
                messages = work.checkpoint(work.prior, cut, copies=trimmed[:cut])
                kept = items[max(cut, work.n_carried) :]
                if policy.measure(state, [*view_form(messages), *kept]) <= policy.trigger:
                    self.trims_made += 1
                    return messages, work.covers_to_after(cut), "trim"
                work = attrs.evolve(work, items=tuple(trimmed))  # the summarizer reads less
        plan = self._plan(state, work)
        if plan is None:
            return None
        now = datetime.now(UTC)
        if plan.mode == "groups":
            inputs = [m for m in work.items[: plan.cut] if m is not plan.opener]
            result = await self._call(state, [*work.prior, *inputs], 0)
            summary, covered = split_result(result, inputs)
            if covered != len(inputs) or not summary:
                return None  # the summarizer kept everything: nothing was shrunk
            self._check_summary(summary)
            marked = [mark_summary(m, now) for m in summary]
            messages = work.checkpoint(marked, plan.cut, opener=plan.opener)
            return messages, work.covers_to_after(plan.cut), self._summarizer_name
        result = await self._call(state, [*work.prior, *work.items], plan.keep_turns)
        summary, covered = split_result(result, work.items)
        if covered == 0:
            return None
        if not summary:
            raise SummarizerError(
                "summarizer result has no summary message before the kept turns; "
                "a checkpoint needs one (DESIGN.md §6)"
            )
        self._check_summary(summary)
        marked = [mark_summary(m, now) for m in summary]
        opener = opener_before(work.items, covered)
        messages = work.checkpoint(marked, covered, opener=opener)
        return messages, work.covers_to_after(covered), self._summarizer_name

    def _plan(self, state: KeyState, work: Work) -> Cut | None:
        size_of = state.size_of
        policy = self._policy
        return plan_cut(
            work.items,
            keep_last=self.keep_last,
            size_of=size_of,
            trigger=policy.trigger,
            keep_budget=policy.keep_budget,
            by_tokens=policy.trigger_tokens is not None,
            # Tokens count everything the model gets; pairs only the turns after the header.
            fixed=size_of(header_messages(work.pinned, work.prior))
            if policy.trigger_tokens is not None
            else 0,
        )

    def _may_cut(self, state: KeyState) -> bool:
        """A cheap look (no I/O) at whether a compaction of the cached view could cut
        anything: False when no plan exists (nothing to take the lease for)."""
        view = state.view
        if view is None or self.trim_tool_results is not None:
            return True  # trimming decides inside the compaction
        checkpoint = state.checkpoint
        head = [without_hold(m) for m in checkpoint.messages] if checkpoint else []
        tail = view[state.n_summary :]
        work = Work.build(head, tail, [0] * len(tail), 0)
        return self._plan(state, work) is not None

    async def _call(
        self, state: KeyState, source: list[ChatMessage], keep_last: int
    ) -> list[ChatMessage]:
        state.summarizing = True
        self.summarizer_calls += 1
        try:
            return await run_summarizer(self.summarizer, source, keep_last, self.timeout)
        finally:
            state.summarizing = False

    @staticmethod
    def _check_summary(summary: Sequence[ChatMessage]) -> None:
        for message in summary:
            if message.role == "tool" or message.tool_calls:
                raise SummarizerError(
                    "summarizer result splits a tool call from its results (a summary "
                    "message cannot be a tool call or result)"
                )

    async def _store_checkpoint(
        self, state: KeyState, key: ChatKey, checkpoint: SummaryCheckpoint, base_version: int
    ) -> bool:
        store = self._store
        assert store is not None
        async with state.sync_lock:
            try:
                stored = await store.save_checkpoint(key, checkpoint, expected_version=base_version)
            except InvalidMessageError as exc:  # a layer below refused or dropped the summary
                raise SummarizerError(f"the stack refused the summary: {exc}") from exc
            if stored is None:
                self.checkpoint_conflicts += 1
                await fleet.load(store, key, state)
                return False
            if self._states.get(key) is state and state.view is not None:
                fleet.install(state, stored)
        self.summaries_made += 1
        return True

    # --- summarizing: memory mode (the seed) ---------------------------------------------

    async def _fetch_memory(self, key: ChatKey, limit: int | None) -> list[ChatMessage]:
        state = self._states.get(key)
        if state is not None and state.view is not None:
            self._states.touch(key)
            if self._policy.fallback and self._policy.due(state) and not state.summarizing:
                if self.background:
                    self._schedule(state, key)
                else:
                    await self._resummarize_memory(state, key)
            return serve(state.view, limit, self._policy.window(state))
        raw = start_right(await self.inner.fetch(key))
        if not self._over(raw):
            return serve(raw, limit, None)
        state = self._states.create(key)
        if self.background:  # serve the raw history now; the summary comes in the background
            if state.view is None and not state.lock.locked():
                state.set_view((), raw)
            self._schedule(state, key)
            return serve(state.view or raw, limit, self._policy.window(state))
        async with state.lock:
            if state.view is None:
                # Re-read under the lock (saves may have landed while we waited); saves that
                # land from here on are collected in ``pending`` and kept after the result.
                state.summarizing = True
                state.pending = []
                try:
                    raw = start_right(await self.inner.fetch(key))
                except BaseException:
                    state.summarizing = False
                    self._drop_if_cold(key, state)
                    raise
                if not self._over(raw):
                    state.summarizing = False
                    self._drop_if_cold(key, state)
                    return serve(raw, limit, None)
                await self._summarize_memory(state, key, raw, activation=True)
            assert state.view is not None
            return serve(state.view, limit, self._policy.window(state))

    def _over(self, messages: Sequence[ChatMessage]) -> bool:
        """``messages`` are over the budget (a cold key's raw history)."""
        counter = self._counter
        if counter is None:  # pairs count the messages after the leading prompt
            lead = 1 if messages and messages[0].role in INSTRUCTION_ROLES else 0
            return len(messages) - lead > self._policy.trigger
        total: int = counter.total(messages)
        return total > self._policy.trigger

    async def _resummarize_memory(self, state: KeyState, key: ChatKey) -> None:
        if not self._policy.may_try(state):
            return
        async with state.lock:
            if state.view is not None and self._policy.due(state) and self._policy.may_try(state):
                state.summarizing = True
                state.pending = []
                await self._summarize_memory(state, key, memory.source(state), activation=False)

    async def _summarize_memory(
        self, state: KeyState, key: ChatKey, source: list[ChatMessage], *, activation: bool
    ) -> None:
        """Run the summarizer on ``source``; called with ``state.lock`` held and
        ``state.summarizing`` already set (so no save can slip between snapshot and call)."""
        accepted: list[ChatMessage] | None = None
        self.summarizer_calls += 1
        # The leading system prompt is pinned: never summarized, first in every view.
        pinned = memory.pinned_of(source)
        body = source[1:] if pinned is not None else source
        try:
            accepted = await run_summarizer(self.summarizer, body, self.keep_last, self.timeout)
        except BaseException as exc:
            self.summary_failures += 1
            if not isinstance(exc, SummarizerError):
                raise
            self._policy.failed(state, key, exc)
            if not self._policy.fallback:
                raise
        finally:
            state.summarizing = False
            pending, state.pending = state.pending, []
            seen = {m.id for m in source}
            late = [m for m in pending if m.id not in seen]
            if accepted is not None:
                self._policy.succeeded(state)
                memory.install(state, pinned, accepted, late)
                if accepted != body:  # an unchanged view: nothing could be summarized
                    self.summaries_made += 1
                    state.compactions = next(self._compaction_seq)
                self._policy.settle(state)
            elif state.view is None and activation:
                if self._policy.fallback:  # serve the raw window until a retry succeeds
                    state.stored_head = ()
                    state.set_view((), [*source, *late])
                else:
                    self._drop_if_cold(key, state)  # cold: the next fetch tries again
            # On failure an active view already holds source + pending.

    def _drop_if_cold(self, key: ChatKey, state: KeyState) -> None:
        if state.view is None and not state.lock.statistics().tasks_waiting:
            self._states.drop(key, state)

    # --- manual compaction ---------------------------------------------------------------

    async def compact(
        self, key: ChatKey, summary: str | ChatMessage | None = None
    ) -> list[ChatMessage]:
        """Summarize ``key`` now, whatever its length, or install ``summary``.

        Args:
            key: the conversation.
            summary: ``None``: call the summarizer on the current view now (a view of at
                most ``keep_last`` turns has nothing to summarize and stays). A text or a
                message: install it as the summary covering the whole raw record so far
                (the view becomes the leading system/developer prompt, unchanged, then that
                summary, until the next save).

        Returns:
            The key's new view (what ``fetch`` returns now).

        Raises:
            InvalidArgumentError: the key holds no messages.
            InvalidMessageError: ``summary`` is empty or not a valid message.
            SummarizerError: the summarizer failed (whatever ``on_error`` says: compaction
                was asked for explicitly).
            ConflictError: another worker is summarizing the key (store mode).
        """
        message = (
            summary_message(summary, self.summary_role, datetime.now(UTC))
            if summary is not None
            else None
        )
        if self._store is None:
            return await self._compact_memory(key, message)
        store = self._store
        state = self._states.create(key)
        async with state.lock:
            async with state.sync_lock:
                if state.view is None:
                    await fleet.load(store, key, state)
            assert state.view is not None
            if state.head is None or state.head.last_seq == 0:
                raise InvalidArgumentError(f"nothing to compact: {key!r} holds no messages")
            if message is None:
                try:
                    await self._summarize_store(state, key, force=True)
                except SummarizerError as exc:
                    self.summary_failures += 1
                    self._policy.failed(state, key, exc)
                    raise
                self._policy.succeeded(state)
            else:
                await self._install_manual(state, key, message)
            return list(state.view)

    async def _install_manual(self, state: KeyState, key: ChatKey, message: ChatMessage) -> None:
        store = self._store
        assert store is not None
        async with fleet.lease(store, key, self._owner, self.lease_ttl) as held:
            if not held:
                self.lease_busy += 1
                raise ConflictError(
                    f"another worker is summarizing {key!r}; try again within {self.lease_ttl} s"
                )
            for _ in range(3):
                async with state.sync_lock:
                    await fleet.read_back(store, key, state)
                    assert state.head is not None
                    assert state.view is not None
                    # The leading system/developer prompt stays first, ahead of the summary.
                    stored = state.checkpoint.messages if state.checkpoint is not None else ()
                    pinned = pinned_prompt(stored, state.view[state.n_summary :])
                    messages = [mark_verbatim(pinned), message] if pinned else [message]
                    checkpoint = fleet.new_checkpoint(
                        messages, state.synced_seq, state.head.epoch, "manual", datetime.now(UTC)
                    )
                    base_version = state.cp_version
                if await self._store_checkpoint(state, key, checkpoint, base_version):
                    self._policy.succeeded(state)
                    return
        raise ConflictError(f"the record of {key!r} kept changing; compaction not installed")

    async def _compact_memory(self, key: ChatKey, message: ChatMessage | None) -> list[ChatMessage]:
        state = self._states.create(key)
        async with state.lock:
            cached = state.view is not None
            source = memory.source(state) if cached else start_right(await self.inner.fetch(key))
            if not source:
                self._drop_if_cold(key, state)
                raise InvalidArgumentError(f"nothing to compact: {key!r} holds no messages")
            if message is not None:
                # The leading system/developer prompt stays first, ahead of the summary.
                memory.install(state, memory.pinned_of(source), [message])
                state.hold = None
                state.compactions = next(self._compaction_seq)
            else:
                state.summarizing = True
                state.pending = []
                fallback, self._policy.on_error = self._policy.on_error, "raise"
                try:
                    await self._summarize_memory(state, key, source, activation=True)
                finally:
                    self._policy.on_error = fallback
            assert state.view is not None
            return list(state.view)

    # --- erasure and lifecycle -------------------------------------------------------------

    async def delete(self, key: ChatKey) -> None:
        self._states.drop(key)
        await self.inner.delete(key)
        self._states.drop(key)

    async def delete_user(self, user_id: str) -> None:
        check_key_part("user_id", user_id)
        self._states.drop_user(user_id)
        await self.inner.delete_user(user_id)
        self._states.drop_user(user_id)

    async def purge(self, *, now: datetime | None = None) -> int:
        """Purge raw messages older than the store's retention (with their checkpoints);
        every cached view is dropped when anything was purged."""
        purged = await super().purge(now=now)
        if purged:
            self._states.clear()
        return purged

    async def aclose(self) -> None:
        """Cancel running background summaries (nothing is lost: the raw record holds every
        message, and no checkpoint is half written), then close the stack below."""
        group = getattr(self, "_group", None)
        if group is not None:
            self._group = None
            await group.__aexit__(None, None, None)
        self._states.clear()
        await self.inner.aclose()

    def describe(self) -> str:
        return (
            "SummarizingChatStorage("
            + (
                f"trigger_tokens={self.trigger_tokens}, keep_tokens={self._policy.keep_budget}, "
                f"model={self.model}, "
                if self.trigger_tokens is not None
                else f"trigger_at={self.trigger_at}, "
            )
            + f"keep_last={self.keep_last}, "
            + (f"trim_tool_results={self.trim_tool_results}, " if self.trim_tool_results else "")
            + ("background=True, " if self.background else "")
            + f"max_buffers={self.max_buffers}, summaries={self.summaries}, "
            + (f"coherence={self.coherence}, " if self.summaries == "store" else "")
            + f"on_error={self.on_error}, summarizer={self._summarizer_name})"
        )


def _describe(component: object) -> str:
    own = getattr(component, "describe", None)
    return str(own()) if callable(own) else type(component).__name__

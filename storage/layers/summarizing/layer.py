"""``SummarizingChatStorage``: short views of long histories; the raw record untouched.

The layer itself (its contract: :mod:`storage.layers.summarizing`) only delegates: its options
are :mod:`.options` (validated once, frozen), where a key's view comes from is a
:class:`~storage.layers.summarizing.views.Views` (:mod:`.store_views` or :mod:`.memory_views`,
chosen at construction), and background summaries run in :mod:`.background`'s runner. Its
public methods check what is the layer's to check, call the inner store for the raw record,
and hand the rest to the views.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

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
    TimeTravelStorage,
)
from storage.layers.summarizing.attributes import LayerAttributes
from storage.layers.summarizing.background import BackgroundRunner
from storage.layers.summarizing.edits import RecordEdits
from storage.layers.summarizing.options import (
    CoherenceChoice,
    ContextWindow,
    KeepLast,
    KeepTokens,
    LeaseTtl,
    MaxBuffers,
    OnErrorChoice,
    ProcessRecheck,
    RetryBackoff,
    RetryMax,
    Summaries,
    SummariesChoice,
    SummarizingOptions,
    SummaryRoleChoice,
    Timeout,
    TriggerAt,
    TriggerFraction,
    TriggerTokens,
    TrimKeepTurns,
    TrimToolResults,
)
from storage.layers.summarizing.policy import Policy
from storage.layers.summarizing.projection import summary_message
from storage.layers.summarizing.views import Views, open_views
from storage.message import ChatKey, ChatMessage, check_key_part
from storage.protocol import ChatStorage, ChatStorageWrapper
from storage.summarizer import ChatSummarizer, default_summarizer

__all__ = ["SummarizingChatStorage"]


class SummarizingChatStorage(LayerAttributes, RecordEdits, ChatStorageWrapper):
    """Serve a summarized view of long histories; the inner store keeps every raw message.

    Args:
        inner: the wrapped store (often a scrubbing layer over a base store).
        summarizer: ``async (view, keep_last) -> new view``; default: the registry's
            ``"extractive"``, ``summarizers.ExtractiveSummarizer()`` (offline, deterministic).
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
        trim_keep_turns: turns whose tool results no no-model step changes (trimming,
            clearing; default 2, >= 0).
        clear_tool_results: at compaction points, before any summary is made, in the view
            only: a tool result older than the last ``trim_keep_turns`` turns whose facts and
            words the view's summary already states is replaced by a short marker, and so is
            an older result of a call (same tool, same arguments) made again later; the call
            stays answered (:mod:`.clearing`). No model call when that brings the view under
            the budget. Default ``True``.
        background: a save returns once the raw write is done; summaries are made in a task
            group the layer owns: enter it with ``async with layer:`` (or
            ``async with layer.background_tasks():``) before use.
        max_buffers: keys whose view is kept in memory; the least recently used go cold.
        timeout: seconds one summarizer call may take (``None``: no limit); a timeout is a
            failure (rule 6).
        summaries: ``"store"``: summaries are checkpoints in the store (shared by every
            instance, kept across restarts); ``"memory"``: in this process only (agent-squad's
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
        clears_made: compactions made by clearing tool results the summary holds (no
            summarizer call).
        collapses_made: compactions made by clearing older results of repeated calls, after
            clearing (no summarizer call).
        trims_made: compactions made by trimming, after clearing and collapsing (no
            summarizer call).
        saves_triggering: saves that found the view due and started (or, in background
            mode, scheduled) a compaction.
        serve_only: settable, default ``False``. ``True``: the layer makes no summary (no
            summarizer call, no checkpoint written); a view is the stored checkpoint as it is
            and the raw messages after it, or the raw record. For tools that only read: the
            CLI's read-only commands set it, so looking at a conversation never changes
            what the deployment's own stack serves. ``compact()`` still compacts.

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
        ConfigError: on construction (a ``ValueError`` too): every value out of range or
            not a choice, at once, each named (each option's rule is declared in its
            annotation, :mod:`.options`, so config lists them with every other problem of a
            URL or file); conflicting budgets (``trigger_at`` with a token budget,
            ``trigger_tokens`` with ``trigger_fraction``, ``keep_tokens`` without a token
            budget); ``trigger_fraction`` for a model with no known context window and no
            ``context_window``; ``summaries="store"`` over a stack without the
            ``CheckpointStorage`` ability. After construction: a ``save`` or ``fetch`` of a
            ``background=True`` layer that was not entered (``async with layer:``), before
            anything is written.
        SummarizerError: from the ``save`` or ``fetch`` that triggered a failing summarizer
            (``on_error="raise"``; in background mode the failure is logged and counted).
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
        transforms=(DescribableStorage, ReplaceableStorage, RetentionStorage, TimeTravelStorage),
        hides=(CheckpointStorage,),
    )

    def __init__(
        self,
        inner: ChatStorage,
        summarizer: ChatSummarizer | None = None,
        *,
        trigger_at: TriggerAt | None = None,
        keep_last: KeepLast = 2,
        max_buffers: MaxBuffers = 10_000,
        timeout: Timeout | None = None,
        summaries: SummariesChoice | None = None,
        coherence: CoherenceChoice = "store",
        on_error: OnErrorChoice = "raise",
        lease_ttl: LeaseTtl | None = None,
        retry_backoff: RetryBackoff = 5.0,
        retry_max: RetryMax = 300.0,
        summary_role: SummaryRoleChoice = "system",
        clock: Callable[[], float] | None = None,
        trigger_tokens: TriggerTokens | None = None,
        keep_tokens: KeepTokens | None = None,
        trigger_fraction: TriggerFraction | None = None,
        model: str | None = None,
        trim_tool_results: TrimToolResults | None = None,
        trim_keep_turns: TrimKeepTurns = 2,
        clear_tool_results: bool = True,
        background: bool = False,
        context_window: ContextWindow | None = None,
        process_recheck: ProcessRecheck | None = 1.0,
    ) -> None:
        super().__init__(inner)
        self._options = options = SummarizingOptions.of(
            trigger_at=trigger_at,
            keep_last=keep_last,
            max_buffers=max_buffers,
            timeout=timeout,
            summaries=summaries,
            coherence=coherence,
            on_error=on_error,
            lease_ttl=lease_ttl,
            retry_backoff=retry_backoff,
            retry_max=retry_max,
            summary_role=summary_role,
            clock=clock or time.monotonic,
            trigger_tokens=trigger_tokens,
            keep_tokens=keep_tokens,
            trigger_fraction=trigger_fraction,
            model=model,
            trim_tool_results=trim_tool_results,
            trim_keep_turns=trim_keep_turns,
            clear_tool_results=clear_tool_results,
            background=background,
            context_window=context_window,
            process_recheck=process_recheck,
        )
        self._policy = policy = Policy.of(options)
        self._runner = BackgroundRunner()
        # Background mode: a save or fetch first checks that the runner's group is open.
        self._background = self._runner if options.background else None
        self._views: Views = open_views(
            inner,
            options,
            policy,
            summarizer if summarizer is not None else default_summarizer(),
            self._background,
        )
        self._states = self._views.states
        self._counts = self._views.counts

    @property
    def summarizer(self) -> ChatSummarizer:
        """The summarizer (settable: the next summary is made by the new one)."""
        return self._views.summarizer

    @summarizer.setter
    def summarizer(self, summarizer: ChatSummarizer) -> None:
        self._views.summarizer = summarizer

    @property
    def summaries(self) -> Summaries:
        """Where summaries live: ``"store"`` (checkpoints) or ``"memory"`` (this process)."""
        return self._views.summaries

    @property
    def background_open(self) -> bool:
        """The task group background summaries run in is open (``async with layer:`` or
        ``async with layer.background_tasks():``)."""
        return self._runner.open

    # --- reads ---------------------------------------------------------------------------

    def view_version(self, key: ChatKey) -> str | None:
        """A version of ``key``'s cached view that changes only when its head (the summary
        part) is replaced: while it stays the same, every ``fetch`` returns the previous view
        as an exact prefix plus the new messages, so a provider's prompt cache keeps hitting.
        Cheap: no I/O. ``None`` when the key's view is not cached (fetch it first).

        Store mode: ``"<epoch>:<checkpoint version>"``; memory mode: ``"m:<n>"``, ``n`` a
        number this layer gives each compaction (``"m:0"``: the raw history, not summarized).
        """
        return self._views.version(key)

    def is_active(self, key: ChatKey) -> bool:
        """True when ``key`` is served from its cached view."""
        return self._views.is_active(key)

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        background = self._background
        if background is not None and not background.open:
            background.refuse()
        return await self._views.fetch(key, limit)

    # --- writes --------------------------------------------------------------------------

    def _check_entered(self) -> None:
        """A ``background=True`` layer must be entered before use (nothing is written).

        Raises:
            ConfigError: its task group is not open.
        """
        background = self._background
        if background is not None and not background.open:
            background.refuse()

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        self._check_entered()
        views = self._views
        generation = views.generation(key)
        stored = await self.inner.save(key, message)
        return await views.after_save(key, stored, generation)

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        self._check_entered()
        views = self._views
        generation = views.generation(key)
        stored = await self.inner.save_messages(key, messages)
        return await views.after_save(key, stored, generation)

    async def save_messages_if(
        self, key: ChatKey, messages: Sequence[ChatMessage], *, expected_version: str
    ) -> list[ChatMessage]:
        """``save_messages`` only if nobody wrote to the key since its head had
        ``expected_version`` (:class:`storage.abilities.ReplaceableStorage`).

        Raises:
            ConflictError: someone wrote since (nothing stored).
            ConfigError: a ``background=True`` layer that was not entered, before anything
                is written.
        """
        self._check_entered()
        views = self._views
        generation = views.generation(key)
        inner: Any = self.inner
        stored: list[ChatMessage] = await inner.save_messages_if(
            key, messages, expected_version=expected_version
        )
        return await views.after_save(key, stored, generation)

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
            summary_message(summary, self._options.summary_role, datetime.now(UTC))
            if summary is not None
            else None
        )
        return await self._views.compact(key, message)

    # --- erasure and lifecycle -------------------------------------------------------------

    async def delete(self, key: ChatKey) -> None:
        self._views.forget(key)
        await self.inner.delete(key)
        self._views.forget(key)

    async def delete_user(self, user_id: str) -> None:
        check_key_part("user_id", user_id)
        self._views.forget(user_id=user_id)
        await self.inner.delete_user(user_id)
        self._views.forget(user_id=user_id)

    async def purge(self, *, now: datetime | None = None) -> int:
        """Purge raw messages older than the store's retention (with their checkpoints);
        every cached view is dropped when anything was purged."""
        purged = await super().purge(now=now)
        if purged:
            self._views.forget()
        return purged

    @asynccontextmanager
    async def background_tasks(self) -> AsyncIterator[Self]:
        """Own the task group background summaries run in for the block (without closing
        the store after it, unlike ``async with layer:``); summaries still running at its
        end are cancelled (nothing is lost: the raw record holds every message).

        Raises:
            ConfigError: the task group is already open.
        """
        async with self._runner.tasks():
            yield self

    async def drain(self) -> None:
        """Wait until no background summary is running (new ones may start after)."""
        await self._runner.drain()

    async def __aenter__(self) -> Self:
        if self._options.background:
            await self._runner.enter()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancel running background summaries (nothing is lost: the raw record holds every
        message, and no checkpoint is half written), then close the stack below."""
        await self._runner.close()
        self._views.forget()
        await self.inner.aclose()

    def describe(self) -> str:
        o = self._options
        return (
            "SummarizingChatStorage("
            + (
                f"trigger_tokens={o.trigger_tokens}, keep_tokens={self._policy.keep_budget}, "
                f"model={o.model}, "
                if o.trigger_tokens is not None
                else f"trigger_at={o.trigger_at}, "
            )
            + f"keep_last={o.keep_last}, "
            + (f"trim_tool_results={o.trim_tool_results}, " if o.trim_tool_results else "")
            + ("" if o.clear_tool_results else "clear_tool_results=False, ")
            + ("background=True, " if o.background else "")
            + f"max_buffers={o.max_buffers}, summaries={self.summaries}, "
            + (f"coherence={o.coherence}, " if self.summaries == "store" else "")
            + f"on_error={o.on_error}, summarizer={self._views.summarizer_name})"
        )

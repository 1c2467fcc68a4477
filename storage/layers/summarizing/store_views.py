"""Store mode (``summaries="store"``): a view is a checkpoint in the store plus the raw tail.

A summary is a checkpoint stored beside the raw record (through every layer below, so it is
scrubbed and encrypted like a message); a key's view is ``checkpoint + raw messages after
it``, and the cached view is only a cache of that, so a restarted or another worker serves
the same view with no summarizer call.

- Coherence: with ``coherence="store"`` every fetch of a cached key reads the key's head (the
  hot path: one cheap read, the view served from memory when nothing changed) and reads back
  what changed (:mod:`.fleet`); ``coherence="process"`` reads it at most once per
  ``process_recheck`` seconds.
- One summary per threshold crossing fleet-wide: the key's lease is taken around the
  summarizer call, the view read back under it, and the new checkpoint stored with
  compare-and-set on the version it was made from (a lost race reloads the winner's).
- What a compaction makes is :mod:`.compaction`'s; when it is due and what a failure does,
  :mod:`.policy`'s.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

from storage.abilities import CheckpointStorage, SummaryCheckpoint
from storage.durations import format_duration
from storage.errors import ConflictError, InvalidArgumentError, InvalidMessageError, SummarizerError
from storage.layers.summarizing import fleet
from storage.layers.summarizing.background import BackgroundRunner
from storage.layers.summarizing.base_views import BaseViews
from storage.layers.summarizing.clearing import STEPS
from storage.layers.summarizing.compaction import Compaction
from storage.layers.summarizing.cutting import Work, mark_verbatim, pinned_prompt, view_form
from storage.layers.summarizing.hold import with_hold, without_hold
from storage.layers.summarizing.options import Summaries, SummarizingOptions
from storage.layers.summarizing.policy import Policy
from storage.layers.summarizing.projection import serve
from storage.layers.summarizing.provenance import Recorder
from storage.layers.summarizing.reporting import compaction_span
from storage.layers.summarizing.state import KeyStates, StoreState
from storage.message import ChatKey, ChatMessage
from storage.summarizer import ChatSummarizer
from storage.telemetry import NULL_SPAN, SpanHandle, recorder

__all__ = ["StoreViews", "check_limit"]


def check_limit(limit: object) -> int | None:
    """``limit`` checked: ``None`` or an int >= 0.

    Raises:
        InvalidArgumentError: any other value.
    """
    if limit is None:
        return None
    if type(limit) is not int or limit < 0:
        raise InvalidArgumentError(f"limit must be an int >= 0 or None, got {limit!r}")
    return limit


class StoreViews(BaseViews[StoreState]):
    """Views from checkpoints in the store (see the module docstring).

    Args:
        store: the ``CheckpointStorage`` ability of the layer's inner stack.
        owner: this instance's name in the key's lease (host, process, a random part).
        (the others as for :class:`~storage.layers.summarizing.base_views.BaseViews`)
    """

    summaries: Summaries = "store"

    def __init__(
        self,
        options: SummarizingOptions,
        policy: Policy,
        summarizer: ChatSummarizer,
        background: BackgroundRunner | None,
        *,
        store: CheckpointStorage,
        owner: str,
        recorder: Recorder | None = None,
    ) -> None:
        measure = policy.message_size()
        states = KeyStates(options.max_buffers, lambda: StoreState(measure))
        super().__init__(options, policy, states, summarizer, background, recorder)
        self.store = store
        self.owner = owner
        self.coherent = options.coherence == "store"
        self.recheck = options.process_recheck
        self.clock = options.clock
        self.compaction = Compaction(options, policy, self.counts)

    def version(self, key: ChatKey) -> str | None:
        """``"<epoch>:<checkpoint version>"``, ``None`` when the key's view is not cached."""
        state = self.states.get(key)
        if state is None or state.view is None:
            return None
        epoch = state.head.epoch if state.head is not None else ""
        return f"{epoch}:{state.cp_version}"

    # --- reads ---------------------------------------------------------------------------

    async def fetch(self, key: ChatKey, limit: int | None) -> list[ChatMessage]:
        if limit is not None:
            check_limit(limit)
        store = self.store
        state = self.states.peek(key)
        if state is not None and state.view is not None:
            # The hot path: one head read, nothing changed, the view served from memory.
            self.states.bump(key)
            grew = False
            if self.coherent or (
                self.recheck is not None
                and self.clock() >= state.recheck_at
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
            busy = state.busy_until
            if busy is not None and self.clock() >= busy:
                state.busy_until, grew = None, True  # the holder may have died: try again
            if (grew or self.fallback) and self.policy.due(state):
                if self.background is not None:
                    self.schedule(state, key)
                else:
                    await self._trigger(state, key, wait=False, activation=False)
            window = self.window if state.n_summary == 0 else None  # no summary: newest window
            served = serve(state.view, limit, window)
            self.recorder.note(
                key, state.view, state.n_summary, limit, window, len(served), state.checkpoint
            )
            return served
        return await self._fetch_cold(key, limit)

    async def _fetch_cold(self, key: ChatKey, limit: int | None) -> list[ChatMessage]:
        """:meth:`fetch` of a key whose view is not cached: loaded from the store (the
        checkpoint and the raw messages after it), summarized first when due."""
        store = self.store
        state = self.states.create(key)
        async with state.sync_lock:
            if state.view is None:
                await fleet.load(store, key, state)
                if state.checkpoint is not None:
                    self.counts.checkpoints_loaded += 1
                if self.recheck is not None:
                    state.recheck_at = self.clock() + self.recheck
        if self.policy.due(state):
            if self.background is not None:
                self.schedule(state, key)
            else:
                await self._trigger(state, key, wait=True, activation=True)
        assert state.view is not None
        window = self.serve_window(state)
        served = serve(state.view, limit, window)
        self.recorder.note(
            key, state.view, state.n_summary, limit, window, len(served), state.checkpoint
        )
        return served

    def _recheck_due(self, state: StoreState) -> bool:
        """``coherence="process"``: whether the cached key's head is due a read (at most once
        per ``process_recheck`` seconds), so another process's erasure reaches this one."""
        recheck = self.recheck
        if recheck is None:
            return False
        now = self.clock()
        if now < state.recheck_at:
            return False
        state.recheck_at = now + recheck
        return True

    # --- summaries -----------------------------------------------------------------------

    async def refresh(self, state: StoreState, key: ChatKey) -> None:
        await self._trigger(state, key, wait=True, activation=False)

    async def _due_after_save(self, state: StoreState, key: ChatKey) -> None:
        await self._trigger(state, key, wait=False, activation=False)

    async def _trigger(
        self, state: StoreState, key: ChatKey, *, wait: bool, activation: bool
    ) -> None:
        """Make a summary of a due view, per the policy (``wait``: for a running one)."""
        policy = self.policy
        if not policy.may_try(state) or (not wait and state.lock.locked()):
            return
        async with state.lock:
            if not policy.due(state) or not policy.may_try(state):
                return
            try:
                await self._summarize(state, key, force=False)
            except SummarizerError as exc:
                self.counts.summary_failures += 1
                policy.failed(state, key, exc)
                if not policy.fallback:
                    if activation:
                        self.states.drop(key, state)  # cold: the next fetch tries again
                    raise
            else:
                policy.succeeded(state)

    async def _summarize(self, state: StoreState, key: ChatKey, *, force: bool) -> bool:
        """Summarize the key's view under its lease and store the checkpoint (called with
        ``state.lock`` held). Returns True when a new checkpoint was installed. A
        ``compaction`` span of the telemetry hook when a recorder listens.

        Raises:
            SummarizerError: the summarizer failed or its result was refused.
            ConflictError: ``force`` and another worker holds the lease.
        """
        if not force and not self.compaction.may_cut(state):
            return False  # every instance finds the same (a pure function of the view)
        listener = recorder()
        if listener is None:
            return await self._compact(state, key, force, NULL_SPAN)
        trigger = "manual" if force else "inline" if self.background is None else "background"
        with compaction_span(listener, key, state, trigger, "store") as report:
            installed = await self._compact(state, key, force, report)
            report.installed(state.view if installed else None)
            return installed

    async def _compact(
        self, state: StoreState, key: ChatKey, force: bool, report: SpanHandle
    ) -> bool:
        """:meth:`_summarize` (``report``: the span, told why nothing was installed)."""
        store, compaction = self.store, self.compaction
        async with fleet.lease(store, key, self.owner, self.options.lease_ttl) as held:
            if not held:
                self.counts.lease_busy += 1
                # A fetch tries again once the holder's lease has run out (it died, or its
                # checkpoint never came; one that came was read back, so none is due).
                state.busy_until = self.clock() + self.options.lease_ttl
                report.set("outcome", "lease_busy")
                if force:
                    raise self._busy(key)
                return False
            state.busy_until = None
            async with state.sync_lock:
                # The whole view read again, not only what was saved since: a summary is
                # stored for every worker, so it is made of what the layers below serve now
                # (another process's erasure that destroyed the user's data key but failed
                # to delete the record changes no head; the cache would seal the erased
                # text into the summary under the user's next key).
                await fleet.load(store, key, state)
                view = state.view
                assert view is not None
                assert state.head is not None
                if not force and not self.policy.due(state):
                    report.set("outcome", "unchanged")
                    return False  # another worker summarized it meanwhile
                n_summary = state.n_summary
                n_tail = state.sequenced_len()
                seqs = cast(list[int], state.seqs[:n_tail])
                tail = view[n_summary : n_summary + n_tail]
                checkpoint = state.checkpoint
                covers = checkpoint.covers_to if checkpoint is not None else 0
                # The stored form (verbatim copies marked), its old hold left out.
                head = [without_hold(m) for m in state.stored]
                work = Work.build(head, tail, seqs, covers)
                base_version = state.cp_version
                epoch = state.head.epoch
            calls = self.counts.summarizer_calls

            async def originals() -> dict[str, ChatMessage]:  # of earlier cleared results
                return {m.id: m for m in (await store.fetch_since(key, 0)).messages}

            made = await compaction.compose(
                state,
                work,
                self.summarizer,
                self.summarizer_name,
                summarize=force,
                originals=originals,
            )
            if made is None or (made[1] <= covers and made[0] == head):
                report.set("outcome", "unchanged")
                if self.counts.summarizer_calls != calls:
                    # The summarizer kept everything: wait for new material (this process
                    # only: nothing was stored). Without a call every instance finds the
                    # same, so the stored hold stays the one that rules.
                    self.policy.settle(state)
                return False
            messages, covers_to, name = made
            report.set("kind", name if name in STEPS else "summary")
            # The hold is decided from what is stored (the checkpoint and the raw messages
            # after it), and stored with it, so every instance holds the key alike.
            kept = [m for m, seq in zip(tail, seqs, strict=True) if seq > covers_to]
            summary = view_form(messages)
            # Held by groups only after a cut that summarized raw messages: a summarizer that
            # kept everything is not called again for every new group.
            hold = self.policy.hold_after(
                state, [*summary, *kept], len(summary), by_groups=covers_to > covers
            )
            messages = with_hold(messages, hold, state.unit)
            new = fleet.new_checkpoint(messages, covers_to, epoch, name, datetime.now(UTC))
            stored = await self._store_checkpoint(state, key, new, base_version)
            if not stored:
                report.set("outcome", "conflict")
            return stored

    async def _store_checkpoint(
        self, state: StoreState, key: ChatKey, checkpoint: SummaryCheckpoint, base_version: int
    ) -> bool:
        """Store ``checkpoint`` if the key's is still ``base_version`` (compare-and-set) and
        start the cached view with it; a lost race loads the winner's. True: stored."""
        store = self.store
        async with state.sync_lock:
            try:
                stored = await store.save_checkpoint(key, checkpoint, expected_version=base_version)
            except InvalidMessageError as exc:  # a layer below refused or dropped the summary
                raise SummarizerError(f"the stack refused the summary: {exc}") from exc
            if stored is None:
                self.counts.checkpoint_conflicts += 1
                await fleet.load(store, key, state)
                return False
            if self.states.get(key) is state and state.view is not None:
                state.install(stored)
        self.counts.summaries_made += 1
        return True

    def _busy(self, key: ChatKey) -> ConflictError:
        return ConflictError(
            f"another worker is summarizing {key}; try again within "
            f"{format_duration(self.options.lease_ttl)} (its lease runs out by then)"
        )

    # --- manual compaction -----------------------------------------------------------------

    async def compact(self, key: ChatKey, summary: ChatMessage | None) -> list[ChatMessage]:
        """Summarize the key now (``None``: whatever ``on_error`` says, a failure raises), or
        install ``summary`` as a checkpoint covering the whole record so far.

        Raises:
            InvalidArgumentError: the key holds no messages.
            SummarizerError: the summarizer failed.
            ConflictError: another worker is summarizing the key.
        """
        state = self.states.create(key)
        async with state.lock:
            async with state.sync_lock:
                if state.view is None:
                    await fleet.load(self.store, key, state)
            assert state.view is not None
            if state.head is None or state.head.last_seq == 0:
                raise InvalidArgumentError(f"nothing to compact: {key} holds no messages")
            if summary is None:
                try:
                    await self._summarize(state, key, force=True)
                except SummarizerError as exc:
                    self.counts.summary_failures += 1
                    self.policy.failed(state, key, exc)
                    raise
                self.policy.succeeded(state)
            else:
                await self._install_manual(state, key, summary)
            return list(state.view)

    async def _install_manual(self, state: StoreState, key: ChatKey, message: ChatMessage) -> None:
        listener = recorder()
        if listener is None:
            return await self._install_given(state, key, message)
        with compaction_span(listener, key, state, "manual", "store") as report:
            report.set("kind", "given")
            await self._install_given(state, key, message)
            report.installed(state.view)
        return None

    async def _install_given(self, state: StoreState, key: ChatKey, message: ChatMessage) -> None:
        store = self.store
        async with fleet.lease(store, key, self.owner, self.options.lease_ttl) as held:
            if not held:
                self.counts.lease_busy += 1
                # A fetch tries again once the holder's lease has run out (it died, or its
                # checkpoint never came; one that came was read back, so none is due).
                state.busy_until = self.clock() + self.options.lease_ttl
                raise self._busy(key)
            for _ in range(3):
                async with state.sync_lock:
                    await fleet.read_back(store, key, state)
                    assert state.head is not None
                    assert state.view is not None
                    # The leading system/developer prompt stays first, ahead of the summary.
                    pinned = pinned_prompt(state.stored, state.view[state.n_summary :])
                    messages = [mark_verbatim(pinned), message] if pinned else [message]
                    # What the view holds, not head.last_seq: a rewind hides messages
                    # whose sequence numbers the head still counts.
                    covers_to = max(
                        (seq for seq in state.seqs if seq is not None),
                        default=state.checkpoint.covers_to if state.checkpoint else 0,
                    )
                    checkpoint = fleet.new_checkpoint(
                        messages, covers_to, state.head.epoch, "manual", datetime.now(UTC)
                    )
                    base_version = state.cp_version
                if await self._store_checkpoint(state, key, checkpoint, base_version):
                    self.policy.succeeded(state)
                    return
        raise ConflictError(f"the record of {key} kept changing; compaction not installed")

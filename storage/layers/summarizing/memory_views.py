"""Memory mode (``summaries="memory"``, agent-squad's behaviour): a key's summary kept in this
process, viewed like a checkpoint.

The first fetch whose raw history is over the budget calls the summarizer (a concurrent fetch
waits for it and gets the same view; a failure leaves the key cold, and the next qualifying
fetch tries again); saves then append to the cached view, and the next summary is made when
it is over the budget again. Saves landing while a summarizer call runs are kept after its
result (``pending``). Views do not see other instances' saves.

The summary part of a memory-mode view is held in its stored form (``KeyState.stored``: the
pinned prompt marked verbatim, then the summary messages, what a checkpoint would hold) and
shown through the same projection as a stored checkpoint
(:func:`~storage.layers.summarizing.cutting.view_form`: one leading message), so both modes
serve the same shape; the next summarizer round reads the stored form back
(:func:`source`), never the merged header. Compactions are made as in store mode
(:meth:`~storage.layers.summarizing.compaction.Compaction.compose`): the no-model steps first,
then whole turns, or a long newest turn's older tool-call groups, with its opening user message
and the copies the steps changed kept verbatim in the stored form.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import attrs

from storage.errors import InvalidArgumentError, SummarizerError
from storage.layers.summarizing.background import BackgroundRunner
from storage.layers.summarizing.base_views import BaseViews
from storage.layers.summarizing.clearing import STEPS
from storage.layers.summarizing.compaction import Compaction, Made
from storage.layers.summarizing.cutting import (
    PINNED_ROLES,
    Work,
    is_verbatim,
    mark_verbatim,
    source_form,
)
from storage.layers.summarizing.options import Summaries, SummarizingOptions
from storage.layers.summarizing.policy import Policy
from storage.layers.summarizing.projection import (
    leading_summaries,
    serve,
    start_right,
    without_orphans,
)
from storage.layers.summarizing.provenance import Recorder
from storage.layers.summarizing.reporting import CompactionReport, compaction_span
from storage.layers.summarizing.state import KeyStates, MemoryState
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage
from storage.summarizer import ChatSummarizer
from storage.telemetry import NULL_SPAN, recorder

__all__ = ["MemoryViews", "carried", "install", "pinned_of", "source"]


def pinned_of(source: Sequence[ChatMessage]) -> ChatMessage | None:
    """The leading system/developer prompt of a summarizer source (``None``: none)."""
    first = source[0] if source else None
    if first is not None and first.role in PINNED_ROLES and not first.is_summary:
        return first
    return None


def source(state: MemoryState) -> list[ChatMessage]:
    """What the next summarizer round of a cached memory-mode view reads: the pinned prompt,
    the prior summary, then the raw messages after it."""
    assert state.view is not None
    return [*source_form(state.stored), *state.view[state.n_summary :]]


def carried(state: MemoryState) -> int:
    """How many verbatim copies (a long turn's opener, messages the no-model steps changed)
    the cached summary part holds after its pinned prompt: in :func:`source`, the raw messages
    right after the prior summary that an earlier compaction kept."""
    stored = state.stored
    pinned = 1 if stored and is_verbatim(stored[0]) and stored[0].role in PINNED_ROLES else 0
    return sum(1 for m in stored[pinned:] if is_verbatim(m))


def install(
    state: MemoryState,
    pinned: ChatMessage | None,
    result: Sequence[ChatMessage],
    late: Sequence[ChatMessage] = (),
) -> None:
    """Make ``state``'s view from a summarizer ``result`` (summary messages, then the raw
    messages it kept) after the ``pinned`` prompt, with ``late`` saves after it."""
    made = leading_summaries(result)
    if made:
        head = [mark_verbatim(pinned)] if pinned is not None else []
        state.show((*head, *result[:made]), [*result[made:], *late])
    else:
        state.show((), [*([pinned] if pinned is not None else []), *result, *late])


class MemoryViews(BaseViews[MemoryState]):
    """Views kept in this process (see the module docstring).

    Args:
        inner: the layer's inner stack (the raw record a cold key is read from).
        (the others as for :class:`~storage.layers.summarizing.base_views.BaseViews`)
    """

    summaries: Summaries = "memory"

    def __init__(
        self,
        options: SummarizingOptions,
        policy: Policy,
        summarizer: ChatSummarizer,
        background: BackgroundRunner | None,
        *,
        inner: ChatStorage,
        recorder: Recorder | None = None,
    ) -> None:
        measure = policy.message_size()
        states = KeyStates(options.max_buffers, lambda: MemoryState(measure))
        super().__init__(options, policy, states, summarizer, background, recorder)
        self.inner = inner
        self._explicit = attrs.evolve(policy, on_error="raise")  # compact() always raises
        self.compaction = Compaction(options, policy, self.counts)
        self._compaction_seq = itertools.count(1)  # the view versions

    def version(self, key: ChatKey) -> str:
        """``"m:<n>"``, ``n`` the number of the view's last compaction (``"m:0"``: the raw
        history, not summarized, or not cached)."""
        state = self.states.get(key)
        return f"m:{state.compactions if state is not None and state.view else 0}"

    async def fetch(self, key: ChatKey, limit: int | None) -> list[ChatMessage]:
        view, head, window, compaction = await self._view(key)
        served = serve(view, limit, window)
        self.recorder.note(key, view, head, limit, window, len(served), None, compaction)
        return served

    def memory_head(self, key: ChatKey, compaction: int) -> Sequence[ChatMessage] | None:
        state = self.states.get(key)
        if state is None or state.view is None or state.compactions != compaction:
            return None
        return state.stored

    async def _view(self, key: ChatKey) -> tuple[list[ChatMessage], int, int | None, int]:
        """The key's view (summarized first when due), the length of its summary part, the
        newest window it is served as and its compaction number (0: no summary)."""
        policy = self.policy
        state = self.states.get(key)
        if state is not None and state.view is not None:
            self.states.touch(key)
            if policy.fallback and policy.due(state) and not state.summarizing:
                if self.background is not None:
                    self.schedule(state, key)
                else:
                    await self._resummarize(state, key)
            return self._shown(state)
        raw = self._raw_view(await self.inner.fetch(key))
        if not policy.over(raw):
            return raw, 0, None, 0
        state = self.states.create(key)
        if self.background is not None:  # serve the raw history now; the summary comes later
            if state.view is None and not state.lock.locked():
                state.show((), raw)
            self.schedule(state, key)
            if state.view is None:
                return raw, 0, None, 0
            return self._shown(state)
        async with state.lock:
            if state.view is None:
                # Re-read under the lock (saves may have landed while we waited); saves that
                # land from here on are collected in ``pending`` and kept after the result.
                state.summarizing = True
                state.pending = []
                try:
                    raw = self._raw_view(await self.inner.fetch(key))
                except BaseException:
                    state.summarizing = False
                    self._drop_if_cold(key, state)
                    raise
                if not policy.over(raw):
                    state.summarizing = False
                    self._drop_if_cold(key, state)
                    return raw, 0, None, 0
                await self._summarize(state, key, raw, activation=True)
            return self._shown(state)

    def _shown(self, state: MemoryState) -> tuple[list[ChatMessage], int, int | None, int]:
        assert state.view is not None
        compaction = state.compactions if state.n_summary else 0
        return state.view, state.n_summary, self.serve_window(state), compaction

    def _saving(self, state: MemoryState, stored: Sequence[ChatMessage]) -> None:
        if state.summarizing:
            state.pending.extend(stored)  # kept after the running call's result

    async def refresh(self, state: MemoryState, key: ChatKey) -> None:
        await self._resummarize(state, key)

    async def _due_after_save(self, state: MemoryState, key: ChatKey) -> None:
        await self._resummarize(state, key)

    async def _resummarize(self, state: MemoryState, key: ChatKey) -> None:
        policy = self.policy
        if not policy.may_try(state):
            return
        async with state.lock:
            if state.view is not None and policy.due(state) and policy.may_try(state):
                state.summarizing = True
                state.pending = []
                await self._summarize(
                    state, key, source(state), activation=False, carried=carried(state)
                )

    async def _summarize(
        self,
        state: MemoryState,
        key: ChatKey,
        source: list[ChatMessage],
        *,
        activation: bool,
        policy: Policy | None = None,
        summarize: bool = False,
        carried: int = 0,
    ) -> None:
        """Compact ``source``: the no-model steps, then the summarizer when they do not make
        the view fit (``summarize``: always). Called with ``state.lock`` held and
        ``state.summarizing`` already set (so no save can slip between snapshot and call).
        ``policy``: what a failure does (default: the layer's); ``carried``: the verbatim
        copies after the prior summary in ``source`` (:func:`carried`). A ``compaction`` span
        of the telemetry hook when a recorder listens."""
        attempt = _Attempt(source, carried)
        listener = recorder()
        if listener is None:
            return await self._compact(state, key, attempt, activation, policy, summarize, None)
        trigger = (
            "manual"
            if policy is not None
            else "inline"
            if self.background is None
            else "background"
        )
        with compaction_span(listener, key, state, trigger, "memory") as report:
            if state.view is None:
                report.set("messages.before", len(source))
            await self._compact(state, key, attempt, activation, policy, summarize, report)

    async def _compact(
        self,
        state: MemoryState,
        key: ChatKey,
        attempt: _Attempt,
        activation: bool,
        policy: Policy | None,
        summarize: bool,
        report: CompactionReport | None,
    ) -> None:
        """:meth:`_summarize` (``report``: the span, told what came of it)."""
        policy = policy or self.policy
        source = attempt.source
        # The leading system prompt is pinned: never summarized, first in every view.
        pinned = pinned_of(source)
        try:
            await self._attempt(state, key, attempt, summarize)
        except BaseException as exc:
            self.counts.summary_failures += 1
            if not isinstance(exc, SummarizerError):
                raise
            policy.failed(state, key, exc)
            if not policy.fallback:
                raise
        finally:
            state.summarizing = False
            pending, state.pending = state.pending, []
            seen = {m.id for m in source}
            late = [m for m in pending if m.id not in seen]
            if attempt.done:
                self._install(state, pinned, attempt, late, policy, report)
            elif state.view is None and activation:
                if policy.fallback:  # serve the raw window until a retry succeeds
                    state.show((), [*source, *late])
                else:
                    self._drop_if_cold(key, state)  # cold: the next fetch tries again
            # On failure an active view already holds source + pending.
            if not attempt.done and report is not None and policy.fallback:
                report.set("outcome", "error")  # absorbed: a fallback view is served

    async def _attempt(
        self, state: MemoryState, key: ChatKey, attempt: _Attempt, summarize: bool
    ) -> None:
        """The compaction of ``attempt.source`` as store mode makes it (the no-model steps,
        then the summarizer unless one of them makes the view fit; ``summarize``: always);
        what comes of it is set on ``attempt``."""
        work = attempt.work
        attempt.calls = self.counts.summarizer_calls

        async def originals() -> dict[str, ChatMessage]:  # of earlier cleared results
            return {m.id: m for m in await self.inner.fetch(key)}

        attempt.made = await self.compaction.compose(
            state,
            work,
            self.summarizer,
            self.summarizer_name,
            summarize=summarize,
            originals=originals,
        )
        attempt.done = True

    def _install(
        self,
        state: MemoryState,
        pinned: ChatMessage | None,
        attempt: _Attempt,
        late: list[ChatMessage],
        policy: Policy,
        report: CompactionReport | None,
    ) -> None:
        """Make the view from a compaction (the source unchanged when nothing could be cut),
        ``late`` saves after it, and count it."""
        policy.succeeded(state)
        made = attempt.made
        work = attempt.work
        if made is None:
            if state.view is None:  # a cold key: its raw view (an active one holds it already)
                install(state, pinned, [*work.prior, *work.items], late)
            if report is not None:
                report.set("outcome", "unchanged")
            if self.counts.summarizer_calls == attempt.calls:
                # Nothing could be cut and no call was made (store mode alike): no hold, the
                # next save looks again, cheaply.
                state.hold = None
                return
            cut = False
        else:
            messages, end, name = made
            state.show(messages, [*work.items[end:], *late])
            self.counts.summaries_made += 1
            state.compactions = next(self._compaction_seq)
            if report is not None:
                report.set("kind", name if name in STEPS else "summary")
                report.installed(state.view)
            cut = end > work.n_carried
        # Held when what the compaction left is over the trigger; the saves that landed
        # during the call (``late``) were not offered to it, so they hold nothing. Held by
        # groups only after a cut that reached past the kept copies, as in store mode.
        view = state.view or []
        left = view[: len(view) - len(late)]
        state.hold = policy.hold_after(state, left, state.n_summary, by_groups=cut)

    @staticmethod
    def _raw_view(raw: list[ChatMessage]) -> list[ChatMessage]:
        """A cold key's raw history as a view: its damaged start and the tool results that
        answer no call left out."""
        return without_orphans(start_right(raw))

    def _drop_if_cold(self, key: ChatKey, state: MemoryState) -> None:
        if state.view is None and not state.lock.statistics().tasks_waiting:
            self.states.drop(key, state)

    async def compact(self, key: ChatKey, summary: ChatMessage | None) -> list[ChatMessage]:
        """Summarize the key now (``None``; a failure raises whatever ``on_error`` says), or
        install ``summary`` after the pinned prompt.

        Raises:
            InvalidArgumentError: the key holds no messages.
            SummarizerError: the summarizer failed.
        """
        state = self.states.create(key)
        async with state.lock:
            cached = state.view is not None
            messages = source(state) if cached else self._raw_view(await self.inner.fetch(key))
            if not messages:
                self._drop_if_cold(key, state)
                raise InvalidArgumentError(f"nothing to compact: {key} holds no messages")
            if summary is not None:
                # The leading system/developer prompt stays first, ahead of the summary.
                listener = recorder()
                with (
                    NULL_SPAN
                    if listener is None
                    else compaction_span(listener, key, state, "manual", "memory")
                ) as report:
                    report.set("kind", "given")
                    install(state, pinned_of(messages), [summary])
                    state.hold = None
                    state.compactions = next(self._compaction_seq)
                    if isinstance(report, CompactionReport):
                        report.installed(state.view)
            else:
                state.summarizing = True
                state.pending = []
                await self._summarize(
                    state,
                    key,
                    messages,
                    activation=True,
                    policy=self._explicit,
                    summarize=True,
                    carried=carried(state) if cached else 0,
                )
            assert state.view is not None
            return list(state.view)


@attrs.define
class _Attempt:
    """One memory-mode compaction attempt: its source (the pinned prompt, the prior summary,
    then the messages after it, of which the first ``carried`` are copies an earlier
    compaction kept), the compaction made (``None``: nothing could be cut) and whether it
    was made (False: none yet, or it failed)."""

    source: list[ChatMessage]
    carried: int = 0
    made: Made | None = None
    done: bool = False
    calls: int = 0  # the layer's summarizer calls before this attempt
    work: Work = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        # The source taken apart once, as a compaction reads it; each message's position
        # (1-based) stands for a store sequence, so a compaction's ``covers_to`` is how many
        # of ``items`` it replaced. (Work.build would give the carried copies the old
        # checkpoint's covers_to, which memory mode has not: positions are its sequence.)
        source = self.source
        pinned = pinned_of(source)
        body = source[1:] if pinned is not None else source
        prior = leading_summaries(body)
        items = tuple(body[prior:])
        self.work = Work(
            pinned, tuple(body[:prior]), items, tuple(range(1, len(items) + 1)), self.carried, 0
        )

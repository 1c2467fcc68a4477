"""What one compaction makes: the next checkpoint of a view, or nothing.

Cheapest first: the no-model steps (:mod:`.clearing`: old tool results the summary already
holds cleared, older results of a call repeated later collapsed, long ones trimmed), each
followed by a look at the budget: the first step after which the view fits makes the
compaction, with no summarizer call. Otherwise a summary of what the steps left: of whole
turns (the last ``keep_last`` stay), or, when the newest turn alone is over the budget, of
that turn's older tool-call groups (:mod:`.cutting` decides where); results the steps changed
that the summary does not cover stay in the checkpoint as they were changed. When nothing can
be summarized, the steps' result is the compaction (smaller, if still over the budget). The
summarizer's result is checked (:mod:`.calling`) and split into the summary part a checkpoint
holds and the raw tail it keeps (:mod:`.projection`). Nothing here reads or writes the store:
the store-mode views (:mod:`.store_views`) take the lease, read the view back and store what
is made; the memory-mode views (:mod:`.memory_views`) make their compactions here too and keep
what is made in this process.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime

import attrs

from storage.errors import SummarizerError
from storage.layers.summarizing.base_views import Counters
from storage.layers.summarizing.calling import run_summarizer
from storage.layers.summarizing.clearing import (
    Stage,
    Step,
    cleared_reason,
    lighten,
    needs_originals,
    still_held,
)
from storage.layers.summarizing.cutting import Cut, Work, opener_before, plan_cut, view_form
from storage.layers.summarizing.header import header_messages
from storage.layers.summarizing.hold import without_hold
from storage.layers.summarizing.options import SummarizingOptions
from storage.layers.summarizing.policy import Policy
from storage.layers.summarizing.projection import mark_summary, split_result
from storage.layers.summarizing.state import KeyState, StoreState
from storage.message import ChatMessage
from storage.summarizer import ChatSummarizer

__all__ = ["Compaction", "Made"]

Made = tuple[list[ChatMessage], int, str]
"""A compaction's result: the checkpoint's messages, the raw position it covers up to, and
what made it (the summarizer's name, or the no-model step: ``"clear"``, ``"collapse"``,
``"trim"``)."""

_COUNTERS: dict[Step, str] = {
    "clear": "clears_made",
    "collapse": "collapses_made",
    "trim": "trims_made",
}


class Compaction:
    """Plans and makes compactions by the layer's options and policy.

    Args:
        options: the layer's options (``keep_last``, trimming, ``timeout``).
        policy: the budget.
        counts: the layer's counters (calls, trims).
    """

    def __init__(self, options: SummarizingOptions, policy: Policy, counts: Counters) -> None:
        self.options = options
        self.policy = policy
        self.counts = counts

    def may_cut(self, state: StoreState) -> bool:
        """A cheap look (no I/O) at whether a compaction of the cached view could cut
        anything: False when no plan exists (nothing to take the lease for)."""
        view = state.view
        if view is None:
            return True
        head = [without_hold(m) for m in state.stored]
        tail = view[state.n_summary :]
        work = Work.build(head, tail, [0] * len(tail), 0)
        return self.plan(state, work) is not None or bool(self.stages(work))

    def stages(self, work: Work) -> list[Stage]:
        """The no-model steps' results on ``work`` (:func:`.clearing.lighten`)."""
        options = self.options
        return lighten(
            work.prior,
            work.items,
            keep_turns=options.trim_keep_turns,
            clear=options.clear_tool_results,
            trim_chars=options.trim_tool_results,
        )

    def fits(self, state: KeyState, view: Sequence[ChatMessage]) -> bool:
        """``view`` (a whole view) is within the budget."""
        return self.policy.measure(state, view) <= self.policy.trigger

    def count(self, step: Step) -> None:
        """Count a compaction made by ``step`` alone."""
        name = _COUNTERS[step]
        setattr(self.counts, name, getattr(self.counts, name) + 1)

    def lightened(self, state: KeyState, work: Work, stages: Sequence[Stage]) -> Stage | None:
        """The first of ``stages`` after which the view fits the budget (``None``: none)."""
        for stage in stages:
            messages = _made_by(work, stage)[0]
            if self.fits(
                state, [*view_form(messages), *stage.items[max(stage.end, work.n_carried) :]]
            ):
                return stage
        return None

    def plan(self, state: KeyState, work: Work) -> Cut | None:
        """Where a compaction of ``work`` cuts (``None``: nothing can be summarized)."""
        size_of = state.size_of
        policy = self.policy
        return plan_cut(
            work.items,
            keep_last=self.options.keep_last,
            size_of=size_of,
            trigger=policy.trigger,
            keep_budget=policy.keep_budget,
            by_tokens=policy.trigger_tokens is not None,
            # Tokens count everything the model gets; pairs only the turns after the header.
            fixed=size_of(header_messages(work.pinned, work.prior))
            if policy.trigger_tokens is not None
            else 0,
        )

    async def compose(
        self,
        state: KeyState,
        work: Work,
        summarizer: ChatSummarizer,
        name: str,
        *,
        summarize: bool = False,
        originals: Callable[[], Awaitable[Mapping[str, ChatMessage]]] | None = None,
    ) -> Made | None:
        """The next checkpoint for ``work`` (``name``: the summarizer's, for the checkpoint),
        or ``None`` when nothing can be cut (module docstring).

        Args:
            summarize: call the summarizer even when a no-model step makes the view fit
                (a compaction asked for explicitly).
            originals: reads the raw messages by id, for results earlier compactions cleared
                (:func:`.clearing.needs_originals`): a new summary that no longer holds what
                one said puts it back (read only then).

        Raises:
            SummarizerError: the summarizer failed or its result was refused.
        """
        stages = self.stages(work)
        last = stages[-1] if stages else None
        before = {m.id: m for m in work.items if cleared_reason(m) is None}
        if last is not None:
            fit = None if summarize else self.lightened(state, work, stages)
            if fit is not None:
                self.count(fit.step)
                return _made_by(work, fit)
            work = attrs.evolve(work, items=last.items)  # the summarizer reads less
        made = await self._summarized(
            state, work, summarizer, name, last.end if last else 0, (before, originals)
        )
        if made is None and last is not None:
            self.count(last.step)  # nothing to summarize: the steps' smaller view
            return _made_by(work, last)
        return made

    async def _summarized(
        self,
        state: KeyState,
        work: Work,
        summarizer: ChatSummarizer,
        name: str,
        changed: int,
        originals: tuple[
            Mapping[str, ChatMessage], Callable[[], Awaitable[Mapping[str, ChatMessage]]] | None
        ],
    ) -> Made | None:
        """The checkpoint a summary of ``work`` makes (``None``: nothing was summarized);
        ``work.items[:changed]`` hold the messages the no-model steps changed: those after
        what the summary covers are kept in the checkpoint as changed, unless the new summary
        no longer holds what a cleared one said (:func:`.clearing.still_held`; ``originals``:
        the messages before the steps by id, and the reader of the raw ones)."""
        plan = self.plan(state, work)
        if plan is None:
            return None
        now = datetime.now(UTC)
        if plan.mode == "groups":
            inputs = [m for m in work.items[: plan.cut] if m is not plan.opener]
            result = await self._call(state, summarizer, [*work.prior, *inputs], 0)
            summary, covered = split_result(result, inputs)
            if covered != len(inputs) or not summary:
                return None  # the summarizer kept everything: nothing was shrunk
            covered = plan.cut
            opener = plan.opener
        else:
            result = await self._call(
                state, summarizer, [*work.prior, *work.items], plan.keep_turns
            )
            summary, covered = split_result(result, work.items)
            if covered == 0:
                return None
            if not summary:
                raise SummarizerError(
                    "summarizer result has no summary message before the kept turns; "
                    "a checkpoint needs one"
                )
            opener = opener_before(work.items, covered)
        _check_summary(summary)
        marked = [mark_summary(m, now) for m in summary]
        end = max(covered, changed)
        before, read = originals
        if read is not None and needs_originals(work.items[covered:]):
            before = {**await read(), **before}
        kept = still_held(work.items[covered:], before, marked)
        work = attrs.evolve(work, items=(*work.items[:covered], *kept))
        copies = work.items[covered:end]
        messages = work.checkpoint(marked, end, opener=opener, copies=copies)
        return messages, work.covers_to_after(end), name

    async def _call(
        self,
        state: KeyState,
        summarizer: ChatSummarizer,
        source: list[ChatMessage],
        keep_last: int,
    ) -> list[ChatMessage]:
        # Restored, not cleared: memory mode marks the whole compaction as running (its saves
        # are collected until the result is installed).
        running, state.summarizing = state.summarizing, True
        self.counts.summarizer_calls += 1
        try:
            return await run_summarizer(summarizer, source, keep_last, self.options.timeout)
        finally:
            state.summarizing = running


def _check_summary(summary: Sequence[ChatMessage]) -> None:
    for message in summary:
        if message.role == "tool" or message.tool_calls:
            raise SummarizerError(
                "summarizer result splits a tool call from its results (a summary "
                "message cannot be a tool call or result)"
            )


def _made_by(work: Work, stage: Stage) -> Made:
    """The checkpoint of a compaction made by ``stage``'s step: the prior summary, then the
    changed messages (and those between them) as copies."""
    messages = work.checkpoint(work.prior, stage.end, copies=stage.items[: stage.end])
    return messages, work.covers_to_after(stage.end), stage.step

"""What one store-mode compaction makes: the next checkpoint of a view, or nothing.

Trimming first (old tool output shortened, :mod:`.trimming`; no model call when that alone
brings the view under the budget), then a summary: of whole turns (the last ``keep_last``
stay), or, when the newest turn alone is over the budget, of that turn's older tool-call
groups (:mod:`.cutting` decides where). The summarizer's result is checked (:mod:`.calling`)
and split into the summary part a checkpoint holds and the raw tail it keeps
(:mod:`.projection`). Nothing here reads or writes the store: the store-mode views
(:mod:`.store_views`) take the lease, read the view back and store what is made.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import attrs

from storage.errors import SummarizerError
from storage.history import last_turns_start
from storage.layers.summarizing.base_views import Counters
from storage.layers.summarizing.calling import run_summarizer
from storage.layers.summarizing.cutting import Cut, Work, opener_before, plan_cut, view_form
from storage.layers.summarizing.header import header_messages
from storage.layers.summarizing.hold import without_hold
from storage.layers.summarizing.options import SummarizingOptions
from storage.layers.summarizing.policy import Policy
from storage.layers.summarizing.projection import mark_summary, split_result
from storage.layers.summarizing.state import StoreState
from storage.layers.summarizing.trimming import trim_tool_results
from storage.message import ChatMessage
from storage.summarizer import ChatSummarizer

__all__ = ["Compaction", "Made"]

Made = tuple[list[ChatMessage], int, str]
"""A compaction's result: the checkpoint's messages, the raw position it covers up to, and
what made it (the summarizer's name, or ``"trim"``)."""


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
        if view is None or self.options.trim_tool_results is not None:
            return True  # trimming decides inside the compaction
        head = [without_hold(m) for m in state.stored]
        tail = view[state.n_summary :]
        work = Work.build(head, tail, [0] * len(tail), 0)
        return self.plan(state, work) is not None

    def plan(self, state: StoreState, work: Work) -> Cut | None:
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
        self, state: StoreState, work: Work, summarizer: ChatSummarizer, name: str
    ) -> Made | None:
        """The next checkpoint for ``work`` (``name``: the summarizer's, for the checkpoint),
        or ``None`` when nothing can be cut.

        Raises:
            SummarizerError: the summarizer failed or its result was refused.
        """
        options, policy = self.options, self.policy
        if options.trim_tool_results is not None:
            items = list(work.items)
            trimmed = trim_tool_results(
                items, keep_turns=options.trim_keep_turns, max_chars=options.trim_tool_results
            )
            if any(a is not b for a, b in zip(items, trimmed, strict=True)):
                cut = last_turns_start(items, options.trim_keep_turns)
                messages = work.checkpoint(work.prior, cut, copies=trimmed[:cut])
                kept = items[max(cut, work.n_carried) :]
                if policy.measure(state, [*view_form(messages), *kept]) <= policy.trigger:
                    self.counts.trims_made += 1
                    return messages, work.covers_to_after(cut), "trim"
                work = attrs.evolve(work, items=tuple(trimmed))  # the summarizer reads less
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
            _check_summary(summary)
            marked = [mark_summary(m, now) for m in summary]
            messages = work.checkpoint(marked, plan.cut, opener=plan.opener)
            return messages, work.covers_to_after(plan.cut), name
        result = await self._call(state, summarizer, [*work.prior, *work.items], plan.keep_turns)
        summary, covered = split_result(result, work.items)
        if covered == 0:
            return None
        if not summary:
            raise SummarizerError(
                "summarizer result has no summary message before the kept turns; "
                "a checkpoint needs one"
            )
        _check_summary(summary)
        marked = [mark_summary(m, now) for m in summary]
        opener = opener_before(work.items, covered)
        messages = work.checkpoint(marked, covered, opener=opener)
        return messages, work.covers_to_after(covered), name

    async def _call(
        self,
        state: StoreState,
        summarizer: ChatSummarizer,
        source: list[ChatMessage],
        keep_last: int,
    ) -> list[ChatMessage]:
        state.summarizing = True
        self.counts.summarizer_calls += 1
        try:
            return await run_summarizer(summarizer, source, keep_last, self.options.timeout)
        finally:
            state.summarizing = False


def _check_summary(summary: Sequence[ChatMessage]) -> None:
    for message in summary:
        if message.role == "tool" or message.tool_calls:
            raise SummarizerError(
                "summarizer result splits a tool call from its results (a summary "
                "message cannot be a tool call or result)"
            )

"""When a summary is due (the budget), and what a summarizer failure does (``on_error``).

The budget counts messages (``trigger_at * 2``, agent-squad's contract: the messages after the
view's leading system/developer message, so the pinned prompt and the summary merged into it
never count as turns) or tokens (``trigger_tokens``, everything the model gets, counted per
message once and kept as a running total). A view is due when
it is over the trigger; a compaction keeps about ``keep_budget`` verbatim at the end (a quarter
of the trigger unless ``keep_tokens`` says otherwise).

The hold: a compaction that could not bring the view under the trigger (what it may cut is
limited: the last turns stay, a tool call and its results are never split) holds the key, so
a key whose newest material cannot be shrunk is not retried on every save. The held key is
due again as soon as either

- the view has grown by ``step`` (``trigger - keep_budget``) since, or
- a new turn has started in its raw tail (a new user message): the boundary a compaction may
  cut at has moved, so newer material allows cutting more, and a view is never left over
  the budget while it could be shrunk; or
- the newest turn was over the trigger on its own (a long agent turn) and a new tool-call
  group has started in it (a new assistant message): such a turn is cut between its groups,
  so the older ones can now be summarized.

In store mode the hold is written into the checkpoint the compaction stored (:mod:`.hold`),
so a restarted worker and every other instance over the same store take the same decision
(the same view, no extra summarizer call). A hold set without storing a checkpoint (the
summarizer kept everything) stays in this process.

``on_error="raise"`` (agent-squad's contract): the error propagates from the ``save`` or
``fetch`` that triggered the call, and the next trigger retries at once.
``on_error="fallback"``: ``save`` and ``fetch`` never fail because of the summarizer; the
failure is counted, logged once per key (until a summary succeeds again), and retried with
exponential backoff on the key's next trigger after ``retry_backoff * 2**(failures-1)``
seconds (at most ``retry_max``), measured on the injected ``clock``. A view with no summary
is served as its newest ``trigger_at * 2`` messages meanwhile (tool-pair safe).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import attrs

from storage.layers.summarizing.hold import Hold
from storage.layers.summarizing.options import OnError, SummarizingOptions
from storage.layers.summarizing.state import KeyState
from storage.message import INSTRUCTION_ROLES, ChatKey, ChatMessage
from storage.tokens import TokenCounter

__all__ = ["OnError", "Policy"]

log = logging.getLogger("storage.layers.summarizing")

LEADING_ROLES = INSTRUCTION_ROLES
"""A view's leading message of these roles (the pinned prompt, alone or with the summary
merged in) is not counted by a pair budget."""


@attrs.define
class Policy:
    """The summarizing layer's trigger and failure rules.

    Attributes:
        threshold: messages budget: a view holding more than this many messages is due
            (``None`` with a token budget).
        on_error: ``"raise"`` or ``"fallback"``.
        clock: monotonic seconds (injected in tests).
        retry_backoff: first retry delay in seconds (``fallback``).
        retry_max: largest retry delay in seconds (``fallback``).
        trigger_tokens: token budget: a view of more tokens is due (``None``: messages).
        keep_tokens: tokens a compaction keeps verbatim at the end (token budget).
        counter: token budget: the per-message counts for the options' ``model``.
        serve_only: make no summary: every view is the stored checkpoint as it is (and the
            raw messages after it), for tools that only read (the CLI's ``show``, ``export``).
    """

    threshold: int | None
    on_error: OnError
    clock: Callable[[], float]
    retry_backoff: float
    retry_max: float
    trigger_tokens: int | None = None
    keep_tokens: int | None = None
    counter: TokenCounter | None = None
    serve_only: bool = False

    @classmethod
    def of(cls, options: SummarizingOptions) -> Policy:
        """The policy of ``options`` (a token budget loads its model's tokenizer).

        Raises:
            ConfigError: the tokenizer's encoding is not available offline.
        """
        tokens = options.trigger_tokens
        return cls(
            options.threshold,
            options.on_error,
            options.clock,
            options.retry_backoff,
            options.retry_max,
            tokens,
            options.keep_tokens,
            TokenCounter(options.model) if tokens is not None else None,
        )

    def message_size(self) -> Callable[[ChatMessage], int] | None:
        """The size of one message in tokens, counted once per message (``None``: the budget
        counts messages). A changed copy keeping a raw message's id (a trimmed or cleared tool
        result, a header merging a summary into the pinned prompt) is counted as its own
        text."""
        counter = self.counter
        if counter is None:
            return None

        def measure(message: ChatMessage) -> int:
            marker = message.metadata.get("chatlayers")
            if marker and marker.get("trimmed_chars"):  # a trimmed or cleared copy keeps its id
                how = marker.get("cleared") or "trimmed"  # the reason names the text
                return counter.count(message, f"{message.id}\x00{how}")
            if marker and marker.get("summary"):  # a header keeps the prompt's id
                return counter.count(message, f"{message.id}\x00{hash(message.text)}")
            return counter.count(message)

        return measure

    def over(self, messages: Sequence[ChatMessage]) -> bool:
        """``messages`` (a cold key's raw history) are over the budget: pairs count the
        messages after the leading prompt, tokens everything."""
        if self.serve_only:
            return False
        counter = self.counter
        if counter is None:
            lead = 1 if messages and messages[0].role in LEADING_ROLES else 0
            return len(messages) - lead > self.trigger
        return counter.total(messages) > self.trigger

    @property
    def fallback(self) -> bool:
        return self.on_error == "fallback"

    @property
    def trigger(self) -> int:
        """The budget in its unit (tokens, else messages)."""
        if self.trigger_tokens is not None:
            return self.trigger_tokens
        assert self.threshold is not None
        return self.threshold

    @property
    def keep_budget(self) -> int:
        """What a compaction inside one long turn keeps verbatim at its end, in the budget's
        unit: ``keep_tokens``, else a quarter of the trigger (at least 1)."""
        if self.keep_tokens is not None:
            return self.keep_tokens
        return max(1, self.trigger // 4)

    @property
    def step(self) -> int:
        """New material (budget unit) a held key waits for before the next attempt."""
        return max(1, self.trigger - self.keep_budget)

    def size(self, state: KeyState) -> int:
        """The view's size in the budget unit (0 for a cold key): its tokens, or its messages
        after the leading system/developer message (pairs count turns, not the header)."""
        view = state.view
        if view is None:
            return 0
        if self.trigger_tokens is not None:
            return state.tokens
        return len(view) - 1 if view and view[0].role in LEADING_ROLES else len(view)

    def measure(self, state: KeyState, view: Sequence[ChatMessage]) -> int:
        """The size ``view`` (a whole view) has in the budget unit, as :meth:`size` counts."""
        if self.trigger_tokens is not None:
            return state.size_of(view)
        return len(view) - 1 if view and view[0].role in LEADING_ROLES else len(view)

    def due(self, state: KeyState) -> bool:
        """The view is over the trigger and not held (see the module docstring)."""
        view = state.view
        if view is None or self.serve_only:
            return False
        if self.trigger_tokens is not None:
            size = state.tokens
        else:
            size = len(view) - 1 if view and view[0].role in LEADING_ROLES else len(view)
        if size <= self.trigger:
            return False
        hold = state.hold
        if hold is None or size >= hold.size or state.tail_turns() > hold.turns:
            return True
        return hold.groups is not None and state.tail_groups() > hold.groups

    def hold_after(
        self,
        state: KeyState,
        view: Sequence[ChatMessage],
        n_summary: int,
        *,
        by_groups: bool = True,
    ) -> Hold | None:
        """The hold after a compaction leaving ``view`` (its first ``n_summary`` messages the
        summary part, the pinned prompt included), ``None`` when it is under the trigger.

        With ``by_groups`` (the compaction summarized raw messages), ``groups`` is set when
        the newest turn, with the summary part, is over the trigger on its own: a compaction
        cuts such a turn between its tool-call groups (``plan_cut``), so each new group lets
        it summarize the older ones. A summarizer that kept everything waits for more
        material than one group (``step``) or a new turn, not a call per group."""
        size = self.measure(state, view)
        if size <= self.trigger:
            return None
        tail = view[n_summary:]
        users = [index for index, m in enumerate(tail) if m.role == "user"]
        newest = users[-1] if users else 0
        groups = None
        if by_groups and self.measure(state, [*view[:n_summary], *tail[newest:]]) > self.trigger:
            groups = sum(1 for m in tail if m.role == "assistant")
        return Hold(size + self.step, len(users), groups)

    def settle(self, state: KeyState) -> None:
        """After a compaction attempt that stored nothing (or in memory mode): hold the key
        when its view is still over the trigger."""
        view = state.view
        state.hold = (
            None if view is None else self.hold_after(state, view, state.n_summary, by_groups=False)
        )

    def may_try(self, state: KeyState) -> bool:
        """No backoff is running for the key."""
        return state.retry_at is None or self.clock() >= state.retry_at

    def window(self, state: KeyState) -> int | None:
        """How many newest messages a view with no summary is served as (fallback only)."""
        if self.fallback and state.n_summary == 0 and self.trigger_tokens is None:
            return self.threshold
        return None

    def failed(self, state: KeyState, key: ChatKey, exc: BaseException) -> None:
        """Record a failure: log it (warning once per key and outage), set the backoff."""
        state.failures += 1
        if state.failures == 1:
            log.warning(
                "summarizer failed for key %r (%s); %s",
                key,
                exc,
                "serving the last view; retrying with backoff"
                if self.fallback
                else "the error propagates; the next trigger retries",
            )
        else:
            log.debug(
                "summarizer failed again for key %r (%d in a row): %s", key, state.failures, exc
            )
        if self.fallback:
            delay = min(self.retry_backoff * 2 ** (state.failures - 1), self.retry_max)
            state.retry_at = self.clock() + delay

    def succeeded(self, state: KeyState) -> None:
        state.failures = 0
        state.retry_at = None

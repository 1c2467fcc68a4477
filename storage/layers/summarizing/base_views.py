"""What the store-mode and memory-mode views share: the layer's parts, the save path, the
counters.

:class:`BaseViews` holds the options, the policy, the bounded per-key states, the counters,
the background runner and the summarizer, and makes the save path (a save appends what the
inner store returned, scrubbed, to a cached view, and starts or schedules a summary the view
is now due); each mode (:mod:`.store_views`, :mod:`.memory_views`) adds where a view comes
from, how a summary is made and stored, and manual compaction.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Generic, TypeVar

import attrs

from storage.abilities import ViewProvenance
from storage.layers.summarizing.background import BackgroundRunner
from storage.layers.summarizing.calling import describe_summarizer
from storage.layers.summarizing.options import Summaries, SummarizingOptions
from storage.layers.summarizing.policy import Policy
from storage.layers.summarizing.provenance import Recorder
from storage.layers.summarizing.state import KeyState, KeyStates
from storage.message import ChatKey, ChatMessage
from storage.summarizer import ChatSummarizer

__all__ = ["BaseViews", "Counters"]

S = TypeVar("S", bound=KeyState)

_BACKGROUND_ROUNDS = 8
"""At most this many summaries one background task makes in a row (each after saves that
landed during the previous one)."""


@attrs.define
class Counters:
    """What the layer counts since construction (its attributes of the same names)."""

    summaries_made: int = 0
    summary_failures: int = 0
    lease_busy: int = 0
    checkpoint_conflicts: int = 0
    checkpoints_loaded: int = 0
    summarizer_calls: int = 0
    clears_made: int = 0
    collapses_made: int = 0
    trims_made: int = 0
    saves_triggering: int = 0


class BaseViews(ABC, Generic[S]):
    """What both modes share (see the module docstring).

    Args:
        options: the layer's validated options.
        policy: when a summary is due, and what a failure does.
        states: the per-key states, of the mode's state class.
        summarizer: the summarizer.
        background: the runner summaries are scheduled in (``None``: made inline).
    """

    summaries: Summaries

    def __init__(
        self,
        options: SummarizingOptions,
        policy: Policy,
        states: KeyStates[S],
        summarizer: ChatSummarizer,
        background: BackgroundRunner | None,
        recorder: Recorder | None = None,
    ) -> None:
        self.options = options
        self.policy = policy
        self.states = states
        self.summarizer = summarizer
        self.summarizer_name = describe_summarizer(summarizer)
        self.background = background
        self.counts = Counters()
        self.recorder = recorder if recorder is not None else Recorder(None, 0)
        self.fallback = options.fallback  # read on every fetch: an attribute, not a property
        # The newest window a view with no summary is served as (fallback, pair budget).
        self.window = options.threshold if options.fallback else None

    @abstractmethod
    async def fetch(self, key: ChatKey, limit: int | None) -> list[ChatMessage]: ...

    @abstractmethod
    async def compact(self, key: ChatKey, summary: ChatMessage | None) -> list[ChatMessage]: ...

    @abstractmethod
    def version(self, key: ChatKey) -> str | None: ...

    @abstractmethod
    async def refresh(self, state: S, key: ChatKey) -> None:
        """Make the key's due summary now (what a background task runs)."""

    @abstractmethod
    async def _due_after_save(self, state: S, key: ChatKey) -> None:
        """Make the summary a save made due, inline."""

    def forget(self, key: ChatKey | None = None, *, user_id: str | None = None) -> None:
        if key is not None:
            self.states.drop(key)
        elif user_id is not None:
            self.states.drop_user(user_id)
        else:
            self.states.clear()
        self.recorder.forget(key, user_id=user_id)

    async def provenance(self, key: ChatKey, message_id: str) -> ViewProvenance | None:
        """The view the reply answered, rebuilt (:mod:`.provenance`), or ``None``."""
        return await self.recorder.rebuild(key, message_id, self.memory_head)

    def memory_head(self, key: ChatKey, compaction: int) -> Sequence[ChatMessage] | None:
        """The stored form of the summary part of ``key``'s view while this instance holds
        compaction ``compaction`` (memory mode; ``None`` in store mode, where checkpoints
        are kept)."""
        return None

    def generation(self, key: ChatKey) -> int:
        state = self.states.get(key)
        return -1 if state is None else state.generation

    def is_active(self, key: ChatKey) -> bool:
        state = self.states.get(key)
        return state is not None and state.view is not None

    async def after_save(
        self, key: ChatKey, stored: list[ChatMessage], generation: int
    ) -> list[ChatMessage]:
        """Add ``stored`` (what the inner store returned: scrubbed, not the raw input) to the
        key's cached view, and start (or schedule) a summary the view is now due.

        ``generation``: the view's generation before the save; a read-back that ran during
        the save (a changed generation) may have brought these messages already.
        """
        if self.recorder.noted and stored:
            await self.recorder.link(key, stored)
        state = self.states.get(key)
        if state is None or not stored:
            return stored
        self._saving(state, stored)
        if state.view is None:
            return stored  # cold (or activating: the activation adds the pending messages)
        state.append(stored, dedupe=state.generation != generation)
        self.states.touch(key)
        if self.policy.due(state) and not state.summarizing:
            self.counts.saves_triggering += 1
            if self.background is not None:
                self.schedule(state, key)
            else:
                await self._due_after_save(state, key)
        return stored

    def schedule(self, state: S, key: ChatKey) -> None:
        """Make the key's summary in the background (at most one task per key).

        Raises:
            ConfigError: the layer's task group is not open.
        """
        background = self.background
        if background is None:
            BackgroundRunner.refuse()
        background.schedule(state, key, self._background_job)

    async def _background_job(self, state: S, key: ChatKey) -> None:
        """The key's background summary, made again while saves that landed during the call
        (not in what it summarized: a key already scheduled is not scheduled again) left the
        view due: without it the view is served over the budget until some later save."""
        for _ in range(_BACKGROUND_ROUNDS):
            made = self.counts.summaries_made
            await self.refresh(state, key)
            if (
                self.counts.summaries_made == made  # nothing installed: failed, busy, held
                or self.states.get(key) is not state  # erased or evicted meanwhile
                or not self.policy.due(state)
            ):
                return

    def serve_window(self, state: KeyState) -> int | None:
        """The newest window ``state``'s view is served as: only a fallback view with no
        summary yet (pair budget); ``None``: the whole view."""
        return self.window if state.n_summary == 0 else None

    def _saving(self, state: S, stored: Sequence[ChatMessage]) -> None:
        """Hook: ``stored`` was just saved for ``state``'s key (before it is added)."""

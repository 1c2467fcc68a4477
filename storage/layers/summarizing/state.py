"""Per-key state of the summarizing layer: the cached view of one key, in a bounded LRU map.

A key's view is ``summary messages + tail``: the summary (a checkpoint's messages, or in
``summaries="memory"`` mode the summarizer's output before the kept turns) followed by the raw
messages after it, oldest first. The view is only a cache: with ``summaries="store"`` the
store holds the checkpoint and the raw record it is derived from. Between compactions the view
only grows at its end.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence

import anyio

from storage.abilities import Head, SummaryCheckpoint
from storage.layers.summarizing.hold import Hold, Unit
from storage.message import ChatKey, ChatMessage

__all__ = ["KeyState", "KeyStates"]


class KeyState:
    """The cached view of one key and its bookkeeping.

    Attributes:
        view: summary messages then the raw tail, oldest first; ``None`` while the key is cold.
        n_summary: how many leading messages of ``view`` are the summary (0: none).
        seqs: store mode only: the store sequence of each tail message (``view[n_summary:]``),
            ``None`` for a message saved through this instance and not read back yet (always
            at the end).
        checkpoint: store mode: the checkpoint the view starts with (``None``: none).
        stored_head: memory mode: what a checkpoint would hold for the view's summary part
            (the pinned prompt marked verbatim, the summary messages); the view shows it
            through :func:`~storage.layers.summarizing.cutting.view_form`.
        cp_version: version of that checkpoint as the store's head reports it (0: none).
        head: store mode: the key's head when the view was last read back.
        synced_seq: store mode: every raw message with ``seq <= synced_seq`` is in the view or
            covered by its checkpoint.
        generation: bumped whenever the view is read back or rebuilt from the store.
        lock: single flight: held while a summary is made (a summarizer call at a time).
        sync_lock: held while the view is read back from the store (never across a summarizer
            call, so fetches never wait for a model).
        summarizing: a summarizer call for this key is running.
        pending: memory mode: messages stored while a summarizer call runs.
        failures: summarizer failures in a row (reset by a success).
        retry_at: ``on_error="fallback"``: the clock time before which no retry is made.
        measure: the size of one message in the layer's budget unit (tokens; ``None``: the
            budget counts messages and ``tokens`` stays 0).
        tokens: running size of ``view`` by ``measure``, kept incrementally: a save adds its
            messages' counts, only a rebuilt view is summed again (from cached counts).
        hold: a compaction that could not bring the view under the trigger sets this: no new
            attempt until the view's size reaches ``hold.size`` or a new turn starts in its
            tail (:mod:`.hold`); store mode reads it from the checkpoint, so every instance
            holds alike. ``None``: not held.
        compactions: times the view's head was replaced (memory mode's view version).
        scheduled: background mode: a summary task for this key is queued or running.
        recheck_at: ``coherence="process"``: the layer's clock time from which the next
            fetch reads the key's head again.
    """

    __slots__ = (
        "checkpoint",
        "compactions",
        "cp_version",
        "failures",
        "generation",
        "head",
        "hold",
        "lock",
        "measure",
        "n_summary",
        "pending",
        "recheck_at",
        "retry_at",
        "scheduled",
        "seqs",
        "stored_head",
        "summarizing",
        "sync_lock",
        "synced_seq",
        "tokens",
        "view",
    )

    def __init__(self, measure: Callable[[ChatMessage], int] | None = None) -> None:
        self.view: list[ChatMessage] | None = None
        self.n_summary = 0
        self.seqs: list[int | None] = []
        self.checkpoint: SummaryCheckpoint | None = None
        self.stored_head: tuple[ChatMessage, ...] = ()
        self.cp_version = 0
        self.head: Head | None = None
        self.synced_seq = 0
        self.generation = 0
        self.lock = anyio.Lock()
        self.sync_lock = anyio.Lock()
        self.summarizing = False
        self.pending: list[ChatMessage] = []
        self.failures = 0
        self.retry_at: float | None = None
        self.measure = measure
        self.tokens = 0
        self.hold: Hold | None = None
        self.compactions = 0
        self.scheduled = False
        self.recheck_at = 0.0

    @property
    def unit(self) -> Unit:
        """The budget unit: ``"tokens"`` with a token measure, else ``"messages"``."""
        return "messages" if self.measure is None else "tokens"

    def tail_turns(self) -> int:
        """User messages in the view's raw tail (after the summary part)."""
        view = self.view
        if view is None:
            return 0
        return sum(1 for m in view[self.n_summary :] if m.role == "user")

    def size_of(self, messages: Sequence[ChatMessage]) -> int:
        """``messages`` measured in the budget unit (tokens, else messages)."""
        measure = self.measure
        return len(messages) if measure is None else sum(map(measure, messages))

    def in_use(self) -> bool:
        """True while a task works on this state (a summary, a read-back)."""
        return self.summarizing or self.lock.locked() or self.sync_lock.locked()

    def set_view(
        self,
        summary: Sequence[ChatMessage],
        tail: Sequence[ChatMessage],
        seqs: Sequence[int | None] = (),
    ) -> None:
        """Replace the view by ``summary + tail`` (``seqs``: the tail's sequences, store mode)."""
        self.view = [*summary, *tail]
        self.n_summary = len(summary)
        self.seqs = list(seqs)
        if self.measure is not None:
            self.tokens = sum(map(self.measure, self.view))

    def append(self, messages: Sequence[ChatMessage], *, dedupe: bool) -> None:
        """Add messages just stored through this instance at the end of the view.

        ``dedupe``: skip messages the view already holds (a read-back that ran while they were
        being saved may have brought them with their sequences).
        """
        assert self.view is not None
        if dedupe:
            have = {m.id for m in self.view[self.n_summary :]}
            messages = [m for m in messages if m.id not in have]
        self.view.extend(messages)
        self.seqs.extend([None] * len(messages))
        if self.measure is not None:
            self.tokens += sum(map(self.measure, messages))

    def sequenced_len(self) -> int:
        """How many tail messages (from the start of the tail) have a known sequence."""
        seqs = self.seqs
        n = len(seqs)
        while n and seqs[n - 1] is None:
            n -= 1
        return n


class KeyStates:
    """``ChatKey -> KeyState``, least recently used first, never more than ``max_entries``.

    The bound holds whatever happens, also while summaries keep failing: idle states are
    evicted first; when every state is in use the least recently used goes anyway (its task
    finishes on a detached state, and the key is cold afterwards).
    """

    __slots__ = ("_map", "bump", "max_entries", "measure", "peek")

    def __init__(
        self, max_entries: int, measure: Callable[[ChatMessage], int] | None = None
    ) -> None:
        self.max_entries = max_entries
        self.measure = measure
        self._map: OrderedDict[ChatKey, KeyState] = OrderedDict()
        # The fetch path's two calls, bound once (C methods: no Python frame per fetch).
        self.peek = self._map.get
        """``peek(key)``: the state of ``key`` or ``None``, not marked used."""
        self.bump = self._map.move_to_end
        """``bump(key)``: mark a key that has a state most recently used."""

    def __len__(self) -> int:
        return len(self._map)

    def __contains__(self, key: object) -> bool:
        return key in self._map

    def __iter__(self) -> Iterator[ChatKey]:
        return iter(list(self._map))

    def get(self, key: ChatKey) -> KeyState | None:
        return self._map.get(key)

    def touch(self, key: ChatKey) -> None:
        """Mark ``key`` most recently used (a no-op when it has no state)."""
        if key in self._map:
            self._map.move_to_end(key)

    def create(self, key: ChatKey) -> KeyState:
        """The state of ``key`` (a new cold one when it has none), marked most recently used."""
        state = self._map.get(key)
        if state is None:
            state = self._map[key] = KeyState(self.measure)
            self._evict()
        else:
            self._map.move_to_end(key)
        return state

    def drop(self, key: ChatKey, state: KeyState | None = None) -> None:
        """Forget ``key`` (only if its state is ``state``, when given)."""
        if state is None or self._map.get(key) is state:
            self._map.pop(key, None)

    def drop_user(self, user_id: str) -> None:
        for key in [k for k in self._map if k.user_id == user_id]:
            del self._map[key]

    def clear(self) -> None:
        self._map.clear()

    def _evict(self) -> None:
        excess = len(self._map) - self.max_entries
        if excess <= 0:
            return
        idle: list[ChatKey] = []
        for key, state in self._map.items():  # least recently used first; stops early
            if not state.in_use():
                idle.append(key)
                if len(idle) == excess:
                    break
        for key in idle:
            del self._map[key]
        excess -= len(idle)
        while excess > 0:  # everything left is in use: the bound still holds
            self._map.popitem(last=False)
            excess -= 1

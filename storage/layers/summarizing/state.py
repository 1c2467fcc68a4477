"""Per-key state of the summarizing layer: the cached view of one key, in a bounded LRU map.

A key's view is ``summary part + tail``: the summary part is what a checkpoint holds (the
pinned prompt and carried copies marked verbatim, the summary messages; ``stored``) as the
view shows it (:func:`~storage.layers.summarizing.cutting.view_form`: one leading message),
followed by the raw messages after it, oldest first. The view is only a cache: with
``summaries="store"`` the store holds the checkpoint and the raw record it is derived from.
Between compactions the view only grows at its end.

State that must agree is set together, by one method each: :meth:`KeyState.show` (the
stored summary part, the view, its size and its hold), :meth:`StoreState.rebuild` and
:meth:`StoreState.install` (those plus the checkpoint and the head it was read under),
:meth:`StoreState.catch_up` (the raw messages read since, the head, what is synced, the
generation). A store-mode view's checkpoint version is its head's, never a copy beside it.
Each of them leaves out the tool results that answer no call
(:func:`~storage.layers.summarizing.projection.orphaned_results`): a view never holds one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

import anyio

from storage.abilities import Head, SummaryCheckpoint, Tail
from storage.layers.summarizing.cutting import view_form
from storage.layers.summarizing.hold import Hold, Unit, read_hold
from storage.layers.summarizing.projection import orphaned_results
from storage.message import ChatKey, ChatMessage

__all__ = ["KeyState", "KeyStates", "MemoryState", "StoreState"]

Measure = Callable[[ChatMessage], int]


class KeyState:
    """The cached view of one key and the bookkeeping both modes share.

    Attributes:
        view: summary part then the raw tail, oldest first; ``None`` while the key is cold.
        n_summary: how many leading messages of ``view`` are the summary part (0: none).
        seqs: the store sequence of each tail message (``view[n_summary:]``), ``None`` for a
            message saved through this instance and not read back yet (always at the end;
            always ``None`` in memory mode).
        stored: the summary part in its stored form (what a checkpoint holds, hold included).
        generation: bumped whenever the view is read back or rebuilt from the store.
        lock: single flight: held while a summary is made (a summarizer call at a time).
        summarizing: a summarizer call for this key is running.
        failures: summarizer failures in a row (reset by a success).
        retry_at: ``on_error="fallback"``: the clock time before which no retry is made.
        measure: the size of one message in the layer's budget unit (tokens; ``None``: the
            budget counts messages and ``tokens`` stays 0).
        tokens: running size of ``view`` by ``measure``, kept incrementally: a save adds its
            messages' counts, only a rebuilt view is summed again (from cached counts).
        hold: a compaction that could not bring the view under the trigger sets this: no new
            attempt until the view's size reaches ``hold.size``, a new turn starts in its
            tail or, in a long turn, a new tool-call group (:mod:`.hold`); read from the
            stored summary part, so every instance holds alike. ``None``: not held.
        scheduled: background mode: a summary task for this key is queued or running.
    """

    __slots__ = (
        "failures",
        "generation",
        "hold",
        "lock",
        "measure",
        "n_summary",
        "retry_at",
        "scheduled",
        "seqs",
        "stored",
        "summarizing",
        "tokens",
        "view",
    )

    def __init__(self, measure: Measure | None = None) -> None:
        self.view: list[ChatMessage] | None = None
        self.n_summary = 0
        self.seqs: list[int | None] = []
        self.stored: tuple[ChatMessage, ...] = ()
        self.generation = 0
        self.lock = anyio.Lock()
        self.summarizing = False
        self.failures = 0
        self.retry_at: float | None = None
        self.measure = measure
        self.tokens = 0
        self.hold: Hold | None = None
        self.scheduled = False

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

    def tail_groups(self) -> int:
        """Assistant messages (tool-call groups and replies) in the view's raw tail."""
        view = self.view
        if view is None:
            return 0
        return sum(1 for m in view[self.n_summary :] if m.role == "assistant")

    def size_of(self, messages: Sequence[ChatMessage]) -> int:
        """``messages`` measured in the budget unit (tokens, else messages)."""
        measure = self.measure
        return len(messages) if measure is None else sum(map(measure, messages))

    def in_use(self) -> bool:
        """True while a task works on this state (a summary)."""
        return self.summarizing or self.lock.locked()

    def show(
        self,
        stored: Sequence[ChatMessage],
        tail: Sequence[ChatMessage],
        seqs: Sequence[int | None] = (),
    ) -> None:
        """Make the view ``stored`` (a summary part in its stored form; empty: none) as the
        view shows it, then ``tail`` (``seqs``: the tail's sequences, store mode). Sets the
        stored form, the view, its summary length, sequences, size and hold together."""
        summary = view_form(stored) if stored else []
        tail, seqs = _answered(tail, seqs, summary)
        self.stored = tuple(stored)
        self.view = [*summary, *tail]
        self.n_summary = len(summary)
        self.seqs = list(seqs)
        if self.measure is not None:
            self.tokens = sum(map(self.measure, self.view))
        self.hold = read_hold(stored, self.unit)

    def append(self, messages: Sequence[ChatMessage], *, dedupe: bool) -> None:
        """Add messages just stored through this instance at the end of the view.

        ``dedupe``: skip messages the view already holds (a read-back that ran while they were
        being saved may have brought them with their sequences).
        """
        assert self.view is not None
        if dedupe:
            have = {m.id for m in self.view[self.n_summary :]}
            messages = [m for m in messages if m.id not in have]
        messages = _answered(messages, (), self.view)[0]
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


def _answered(
    messages: Sequence[ChatMessage],
    seqs: Sequence[int | None],
    before: Sequence[ChatMessage],
    end: int | None = None,
) -> tuple[Sequence[ChatMessage], Sequence[int | None]]:
    """``messages`` (and their ``seqs``, when given) after ``before[:end]`` without the tool
    results that answer no call; the same sequences when there are none."""
    found = orphaned_results(messages, before, end)
    if not found:
        return messages, seqs
    drop = set(found)
    kept = [m for i, m in enumerate(messages) if i not in drop]
    return kept, [s for i, s in enumerate(seqs) if i not in drop]


class StoreState(KeyState):
    """A store-mode key (``summaries="store"``): the view is ``checkpoint + raw tail`` as of
    ``head``.

    Attributes:
        checkpoint: the checkpoint the view starts with (``None``: none); ``stored`` is its
            messages.
        head: the key's head when the view was last read back (``None``: cold).
        synced_seq: every raw message with ``seq <= synced_seq`` is in the view or covered by
            its checkpoint.
        sync_lock: held while the view is read back from the store (never across a summarizer
            call, so fetches never wait for a model).
        recheck_at: ``coherence="process"``: the layer's clock time from which the next fetch
            reads the key's head again.
        busy_until: the layer's clock time after which a fetch tries again a summary that
            found the key's lease held by another worker (one that may have died holding
            it); ``None``: no such summary is waiting.
    """

    __slots__ = ("busy_until", "checkpoint", "head", "recheck_at", "sync_lock", "synced_seq")

    def __init__(self, measure: Measure | None = None) -> None:
        super().__init__(measure)
        self.checkpoint: SummaryCheckpoint | None = None
        self.head: Head | None = None
        self.synced_seq = 0
        self.sync_lock = anyio.Lock()
        self.recheck_at = 0.0
        self.busy_until: float | None = None

    @property
    def cp_version(self) -> int:
        """The version of the view's checkpoint, as the store's head reports it (0: none)."""
        head = self.head
        return head.checkpoint_version if head is not None else 0

    def in_use(self) -> bool:
        """True while a task works on this state (a summary, a read-back)."""
        return self.summarizing or self.lock.locked() or self.sync_lock.locked()

    def rebuild(
        self,
        checkpoint: SummaryCheckpoint | None,
        tail: Sequence[ChatMessage],
        seqs: Sequence[int],
        head: Head,
    ) -> None:
        """The view built from the store: ``checkpoint`` and the raw ``tail`` after it, as
        read under ``head`` (whose checkpoint version, not the one read, is what later heads
        are compared with: a store reporting a version it does not serve cannot make every
        fetch rebuild)."""
        self.checkpoint = checkpoint
        self.show(checkpoint.messages if checkpoint is not None else (), tail, seqs)
        self.head = head
        self.synced_seq = head.last_seq
        self.generation += 1

    def install(self, checkpoint: SummaryCheckpoint) -> None:
        """Start the view with ``checkpoint`` (one this instance just stored): its summary
        part, then every tail message after its ``covers_to`` (messages saved meanwhile
        included)."""
        assert self.view is not None
        assert self.head is not None
        tail = self.view[self.n_summary :]
        keep = [
            (message, seq)
            for message, seq in zip(tail, self.seqs, strict=True)
            if seq is None or seq > checkpoint.covers_to
        ]
        self.checkpoint = checkpoint
        self.show(checkpoint.messages, [m for m, _ in keep], [s for _, s in keep])
        self.head = Head(self.head.last_seq, self.head.epoch, checkpoint.version)

    def catch_up(self, tail: Tail) -> bool:
        """Put the raw messages read after ``synced_seq`` (``tail``, under the same epoch and
        checkpoint) in place of the unread end of the view, and move to ``tail.head``.

        Returns:
            True when the view gained messages it did not hold (saved through another
            instance or process).
        """
        view = self.view
        assert view is not None
        grew = False
        if tail.messages:
            start = self.n_summary
            sequenced = start + self.sequenced_len()
            unread = view[sequenced:]  # saved here, sequence not known yet
            fresh = {m.id for m in tail.messages}
            known = {m.id for m in unread}
            later = [m for m in unread if m.id not in fresh]  # committed after the read
            end, seqs = _answered(
                [*tail.messages, *later], [*tail.seqs, *([None] * len(later))], view, sequenced
            )
            if self.measure is not None:  # only the replaced end is measured
                self.tokens += self.size_of(end) - self.size_of(unread)
            view[sequenced:] = end
            self.seqs[sequenced - start :] = seqs
            grew = any(m.id not in known for m in end)
        self.head = tail.head
        self.synced_seq = max(self.synced_seq, tail.head.last_seq)
        self.generation += 1
        return grew


class MemoryState(KeyState):
    """A memory-mode key (``summaries="memory"``): the summary part lives in this process.

    Attributes:
        pending: messages stored while a summarizer call runs (kept after its result).
        compactions: the number this layer gave the view's last compaction (the view
            version; 0: the raw history, not summarized).
    """

    __slots__ = ("compactions", "pending")

    def __init__(self, measure: Measure | None = None) -> None:
        super().__init__(measure)
        self.pending: list[ChatMessage] = []
        self.compactions = 0


S = TypeVar("S", bound=KeyState)


class KeyStates(Generic[S]):
    """``ChatKey -> state``, least recently used first, never more than ``max_entries``.

    The bound holds whatever happens, also while summaries keep failing: idle states are
    evicted first; when every state is in use the least recently used goes anyway (its task
    finishes on a detached state, and the key is cold afterwards).

    Args:
        max_entries: the bound.
        factory: makes the cold state of a new key.
    """

    __slots__ = ("_factory", "_map", "bump", "max_entries", "peek")

    def __init__(self, max_entries: int, factory: Callable[[], S]) -> None:
        self.max_entries = max_entries
        self._factory = factory
        self._map: OrderedDict[ChatKey, S] = OrderedDict()
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

    def get(self, key: ChatKey) -> S | None:
        return self._map.get(key)

    def touch(self, key: ChatKey) -> None:
        """Mark ``key`` most recently used (a no-op when it has no state)."""
        if key in self._map:
            self._map.move_to_end(key)

    def create(self, key: ChatKey) -> S:
        """The state of ``key`` (a new cold one when it has none), marked most recently used."""
        state = self._map.get(key)
        if state is None:
            state = self._map[key] = self._factory()
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

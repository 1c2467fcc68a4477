"""The view kept coherent with the store, and one summary per crossing fleet-wide.

Everything here works through the ``CheckpointStorage`` ability of the layer's inner stack
(so checkpoints pass through every transforming layer below):

- :func:`load` builds a cold key's view (and its hold) from its checkpoint and the raw
  messages after it (``load_checkpoint`` + one ``fetch_since`` range read; no summarizer
  call);
- :func:`read_back` brings a cached view up to date: the raw messages saved since (through
  any instance), or a rebuild when the record's epoch or the checkpoint's version changed;
- :func:`install` replaces the summary part of a view by a checkpoint this instance stored;
- :func:`lease` holds the key's summarizing lease (``acquire_lease``/``release_lease``)
  around a summarizer call, so only one worker of a fleet makes each summary, and the new
  checkpoint is written with compare-and-set on its version.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import anyio

from storage.abilities import CheckpointStorage, SummaryCheckpoint, Tail
from storage.layers.summarizing.cutting import view_form
from storage.layers.summarizing.hold import read_hold
from storage.layers.summarizing.projection import damaged_start
from storage.layers.summarizing.state import KeyState
from storage.message import ChatKey, ChatMessage

__all__ = ["install", "lease", "load", "new_checkpoint", "read_back"]

_LOAD_ATTEMPTS = 3


async def load(store: CheckpointStorage, key: ChatKey, state: KeyState) -> None:
    """Build ``state``'s view from the store: checkpoint + raw messages after it.

    The two reads are checked against each other (the tail's head names the checkpoint
    version and epoch read); a checkpoint written in between makes it read again.
    """
    previous = -1
    for _ in range(_LOAD_ATTEMPTS):
        checkpoint = await store.load_checkpoint(key)
        tail = await store.fetch_since(key, checkpoint.covers_to if checkpoint else 0)
        version = checkpoint.version if checkpoint is not None else 0
        head = tail.head
        if head.checkpoint_version == version and (
            checkpoint is None or checkpoint.epoch == head.epoch
        ):
            break
        if checkpoint is None and head.checkpoint_version == previous:
            break  # stored but unreadable twice: ignored (the store counted it)
        previous = head.checkpoint_version
    if checkpoint is not None and checkpoint.epoch != head.epoch:
        checkpoint = None  # made under a record that no longer exists
        tail = await store.fetch_since(key, 0)
        head = tail.head
    state.checkpoint = checkpoint
    stored = checkpoint.messages if checkpoint else ()
    messages, seqs = list(tail.messages), list(tail.seqs)
    if checkpoint is None:  # a record a purge cut mid-turn: its orphaned start left out
        lead, start = damaged_start(messages)
        del messages[lead:start], seqs[lead:start]
    state.set_view(view_form(stored), messages, seqs)
    state.hold = read_hold(stored, state.unit)
    # The head's version (not the one read) is what later heads are compared with, so a
    # store reporting a version it does not serve cannot make every fetch rebuild.
    state.cp_version = head.checkpoint_version
    state.head = head
    state.synced_seq = head.last_seq
    state.generation += 1


async def read_back(store: CheckpointStorage, key: ChatKey, state: KeyState) -> bool:
    """Bring a cached view up to date with the store (call with ``state.sync_lock`` held).

    Returns:
        True when the view gained messages it did not hold (saved through another instance or
        process) or was rebuilt.
    """
    tail = await store.fetch_since(key, state.synced_seq)
    head = tail.head
    current = state.head
    if (
        current is None
        or head.epoch != current.epoch
        or head.checkpoint_version != state.cp_version
    ):
        await load(store, key, state)
        return True
    grew = _splice(state, tail)
    state.head = head
    state.synced_seq = max(state.synced_seq, head.last_seq)
    state.generation += 1
    return grew


def _splice(state: KeyState, tail: Tail) -> bool:
    """Put the messages read after ``synced_seq`` in place of the unread end of the view."""
    assert state.view is not None
    if not tail.messages:
        return False
    start = state.n_summary
    sequenced = start + state.sequenced_len()
    unread = state.view[sequenced:]  # saved here, sequence not known yet
    fresh = {m.id for m in tail.messages}
    known = {m.id for m in unread}
    later = [m for m in unread if m.id not in fresh]  # committed after the read's snapshot
    if state.measure is not None:  # only the replaced end is measured, never the whole view
        removed = state.size_of(state.view[sequenced:])
        state.tokens += state.size_of(tail.messages) + state.size_of(later) - removed
    state.view[sequenced:] = [*tail.messages, *later]
    state.seqs[sequenced - start :] = [*tail.seqs, *([None] * len(later))]
    return any(m.id not in known for m in tail.messages)


def install(state: KeyState, stored: SummaryCheckpoint) -> None:
    """Start the view with ``stored`` (a checkpoint this instance just wrote): the summary,
    then every tail message after ``covers_to`` (messages saved meanwhile included)."""
    assert state.view is not None
    assert state.head is not None
    tail = state.view[state.n_summary :]
    keep = [
        (message, seq)
        for message, seq in zip(tail, state.seqs, strict=True)
        if seq is None or seq > stored.covers_to
    ]
    state.checkpoint = stored
    state.set_view(view_form(stored.messages), [m for m, _ in keep], [s for _, s in keep])
    state.hold = read_hold(stored.messages, state.unit)
    state.cp_version = stored.version
    state.head = type(state.head)(state.head.last_seq, state.head.epoch, stored.version)


def new_checkpoint(
    messages: Sequence[ChatMessage],
    covers_to: int,
    epoch: str,
    summarizer: str,
    created_at: datetime,
) -> SummaryCheckpoint:
    """A checkpoint to store (its version is set by the store)."""
    frozen: Any = tuple(messages)  # the attrs converter's type defeats mypy's inference
    return SummaryCheckpoint(frozen, covers_to, epoch, summarizer, created_at)


@asynccontextmanager
async def lease(
    store: CheckpointStorage, key: ChatKey, owner: str, ttl: float
) -> AsyncIterator[bool]:
    """Hold the key's summarizing lease for the block; yields whether it was granted (False:
    another worker is summarizing the key). It is given back even on cancellation."""
    held = await store.acquire_lease(key, owner, ttl)
    try:
        yield held
    finally:
        if held:
            with anyio.CancelScope(shield=True):
                await store.release_lease(key, owner)

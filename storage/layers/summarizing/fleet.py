"""The view kept coherent with the store, and one summary per crossing fleet-wide.

Everything here works through the ``CheckpointStorage`` ability of the layer's inner stack
(so checkpoints pass through every transforming layer below):

- :func:`load` builds a cold key's view (and its hold) from its checkpoint and the raw
  messages after it (``load_checkpoint`` + one ``fetch_since`` range read; no summarizer
  call);
- :func:`read_back` brings a cached view up to date: the raw messages saved since (through
  any instance), or a rebuild when the record's epoch or the checkpoint's version changed;
- :func:`lease` holds the key's summarizing lease (``acquire_lease``/``release_lease``)
  around a summarizer call, so only one worker of a fleet makes each summary, and the new
  checkpoint is written with compare-and-set on its version.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import anyio

from storage.abilities import CheckpointStorage, SummaryCheckpoint
from storage.layers.summarizing.projection import damaged_start
from storage.layers.summarizing.state import StoreState
from storage.message import ChatKey, ChatMessage

__all__ = ["lease", "load", "new_checkpoint", "read_back"]

_LOAD_ATTEMPTS = 3


async def load(store: CheckpointStorage, key: ChatKey, state: StoreState) -> None:
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
    messages, seqs = list(tail.messages), list(tail.seqs)
    if checkpoint is None:  # a record a purge cut mid-turn: its orphaned start left out
        lead, start = damaged_start(messages)
        del messages[lead:start], seqs[lead:start]
    state.rebuild(checkpoint, messages, seqs, head)


async def read_back(store: CheckpointStorage, key: ChatKey, state: StoreState) -> bool:
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
        or head.checkpoint_version != current.checkpoint_version
    ):
        await load(store, key, state)
        return True
    return state.catch_up(tail)


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
    another worker, or another task of this one, is summarizing the key). It is given back
    even on cancellation.

    Each attempt holds it under a name of its own (``owner`` and a random part): a store
    grants a lease again to the owner holding it, so two tasks of one instance (a manual
    compaction beside a background summary, or a key's state evicted and loaded again while
    its summary was queued) would both be granted it and both call the summarizer, and the
    first to finish would give back the other's lease.
    """
    holder = f"{owner}:{uuid.uuid4().hex[:8]}"
    held = await store.acquire_lease(key, holder, ttl)
    try:
        yield held
    finally:
        if held:
            with anyio.CancelScope(shield=True):
                await store.release_lease(key, holder)

"""Make one conversation of a target what it is in a source: :func:`sync_key`.

Idempotent and resumable by message and record ids (a store keeps a saved id once):

1. The target's messages are compared with the source's by id. When they are a prefix (a
   fresh target, or a copy cut short by a kill), only what is missing is written: the
   remaining messages in batches (each atomic) and the missing records, interleaved in the
   source's sequence order, so records keep their place among the messages. When they are
   not (the target was written apart, a ``replace`` or a purge ran on one side only), the
   target's record is replaced by the source's (``replace``: one atomic write, records kept)
   or, on a target that cannot replace, deleted and copied again.
2. The summary checkpoint is copied with ``covers_to`` remapped to the target's sequence
   number of the same message (sequence numbers are each store's own) and the target's
   epoch, by compare-and-set; an identical one (same summarizer, time, covered message and
   summary ids) is left alone. A checkpoint only the target has is dropped (``replace`` with
   its own messages), so both serve the same view.
3. A conversation the source does not hold is deleted from the target.

Writes go through the target side's layers (a ``scrub::`` target scrubs again, which
changes nothing on scrubbed data; an ``encrypt::`` target seals with its own keys).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.errors import ConfigError, ConflictError, InvalidMessageError
from storage.message import ChatKey, ChatMessage
from storage.migrate.sides import Side, Snapshot, read_snapshot

__all__ = ["BATCH", "KeyCopy", "sync_key"]

BATCH = 500
"""Messages per ``save_messages`` call (each batch is atomic; a kill loses no batch)."""
_ATTEMPTS = 3


@attrs.define
class KeyCopy:
    """What :func:`sync_key` did to one conversation.

    Attributes:
        key: the conversation.
        messages: messages in the source; ``messages_copied``: written to the target.
        checkpoint: whether the source has a checkpoint; ``checkpoint_copied``: written.
        records: records in the source; ``records_copied``: written to the target.
        rewritten: the target's record was replaced (it was not a prefix of the source's).
        deleted: the source holds nothing and the target's conversation was deleted.
    """

    key: ChatKey
    messages: int = 0
    messages_copied: int = 0
    checkpoint: bool = False
    checkpoint_copied: bool = False
    records: int = 0
    records_copied: int = 0
    rewritten: bool = False
    deleted: bool = False

    @property
    def changed(self) -> bool:
        return bool(
            self.messages_copied
            or self.checkpoint_copied
            or self.records_copied
            or self.rewritten
            or self.deleted
        )


async def sync_key(
    source: Side,
    target: Side,
    key: ChatKey,
    *,
    batch: int = BATCH,
    snapshot: Snapshot | None = None,
) -> KeyCopy:
    """Make ``key`` on ``target`` hold what it holds on ``source`` (see the module).

    Args:
        snapshot: the source's snapshot of ``key`` when the caller read it already.

    Raises:
        ConfigError: the source has a checkpoint or records the target cannot keep.
        ConflictError: the target's checkpoint kept changing while it was written.
        ChatStorageError: from either store (what was written before stays written).
    """
    src = snapshot if snapshot is not None else await read_snapshot(source, key)
    tgt = await read_snapshot(target, key)
    done = KeyCopy(key, len(src.messages), 0, src.checkpoint is not None, False, len(src.records))
    if src.empty:
        if not tgt.empty:
            await target.storage.delete(key)
            done.deleted = True
        return done
    src_ids = [m.id for m in src.messages]
    held = [m.id for m in tgt.messages]
    if held != src_ids[: len(held)]:
        tgt = await _rewrite(target, key, src.messages, tgt)
        done.rewritten = True
        done.messages_copied = len(src.messages) if tgt.messages else 0
        held = [m.id for m in tgt.messages]
    have_records = {r.id for r in tgt.records}
    missing_records = [r for r in src.records if r.id not in have_records]
    if missing_records and target.records is None:
        raise ConfigError(f"{target.label} cannot keep conversation records (the source has some)")
    done.messages_copied += await _write(target, key, src, len(held), missing_records, batch=batch)
    done.records_copied = len(missing_records)
    # What the target held before still holds when nothing was written: no second read.
    before = None if done.changed else tgt
    done.checkpoint_copied = await _sync_checkpoint(target, key, src, before)
    return done


async def _rewrite(
    target: Side, key: ChatKey, messages: Sequence[ChatMessage], tgt: Snapshot
) -> Snapshot:
    """Make the target's record ``messages`` (the checkpoint goes; records stay where the
    target can replace); returns what the target holds now (messages empty: copy them)."""
    if target.replaceable is not None:
        try:
            await target.replaceable.replace(key, messages)
            return attrs.evolve(tgt, messages=tuple(messages), seqs=None, checkpoint=None)
        except InvalidMessageError:
            pass  # a record save accepted but replace's history check refuses: copy it
    await target.storage.delete(key)
    return Snapshot((), None, None, None, ())


async def _write(
    target: Side,
    key: ChatKey,
    src: Snapshot,
    start: int,
    records: list[ConversationRecord],
    *,
    batch: int,
) -> int:
    """Write ``src.messages[start:]`` and ``records`` in the source's sequence order; return
    how many messages were written."""
    pending = list(src.messages[start:])
    if not pending and not records:
        return 0
    seqs = list(src.seqs[start:]) if src.seqs is not None else None
    queue: list[tuple[int, int, ChatMessage | ConversationRecord]] = []
    if seqs is not None:
        queue += [(seq, 1, m) for seq, m in zip(seqs, pending, strict=True)]
        queue += [(r.seq, 0, r) for r in records]  # a record before the message it precedes
        queue.sort(key=lambda item: (item[0], item[1]))
    else:
        queue += [(0, 1, m) for m in pending] + [(0, 2, r) for r in records]
    run: list[ChatMessage] = []
    written = 0
    for _, _, item in queue:
        if isinstance(item, ChatMessage):
            run.append(item)
            if len(run) >= batch:
                written += await _flush(target, key, run)
            continue
        written += await _flush(target, key, run)
        assert target.records is not None
        await target.records.save_record(key, attrs.evolve(item, seq=0))
    written += await _flush(target, key, run)
    return written


async def _flush(target: Side, key: ChatKey, run: list[ChatMessage]) -> int:
    if not run:
        return 0
    count = len(run)
    await target.storage.save_messages(key, list(run))
    run.clear()
    return count


def _same_checkpoint(a: SummaryCheckpoint, b: SummaryCheckpoint, covers_to: int) -> bool:
    return (
        a.covers_to == covers_to
        and a.summarizer == b.summarizer
        and a.created_at == b.created_at
        and [m.id for m in a.messages] == [m.id for m in b.messages]
    )


async def _sync_checkpoint(
    target: Side, key: ChatKey, src: Snapshot, before: Snapshot | None
) -> bool:
    """Copy (or drop) the checkpoint so the target's matches the source's; whether a
    checkpoint was written. ``before``: the target's snapshot when it is still current."""
    if src.checkpoint is None:
        if target.checkpoints is not None and (before is None or before.checkpoint is not None):
            await _drop_checkpoint(target, key)
        return False
    if target.checkpoints is None:
        raise ConfigError(
            f"{target.label} cannot keep summary checkpoints: the migrated conversations "
            "would be summarized again"
        )
    covered = src.covered_id()
    assert covered is not None
    for attempt in range(_ATTEMPTS):
        tgt = before if attempt == 0 and before is not None else await read_snapshot(target, key)
        covers_to = tgt.seq_of(covered)
        if covers_to is None or tgt.head is None:
            raise ConflictError(f"{key}: the message the summary covers is not in the target")
        current = tgt.checkpoint
        if current is not None and _same_checkpoint(current, src.checkpoint, covers_to):
            return False
        made = SummaryCheckpoint(
            src.checkpoint.messages,
            covers_to,
            tgt.head.epoch,
            src.checkpoint.summarizer,
            src.checkpoint.created_at,
        )
        stored = await target.checkpoints.save_checkpoint(
            key, made, expected_version=tgt.head.checkpoint_version
        )
        if stored is not None:
            return True
    raise ConflictError(f"{key}: the target's summary checkpoint kept changing; run it again")


async def _drop_checkpoint(target: Side, key: ChatKey) -> None:
    """Drop a checkpoint the source does not have (a replace with the same messages)."""
    assert target.checkpoints is not None
    if await target.checkpoints.load_checkpoint(key) is None:
        return
    if target.replaceable is None or target.sequenced is None:
        return  # verify names it
    tail = await target.sequenced.fetch_since(key, 0)
    try:
        await target.replaceable.replace(key, tail.messages, expected_version=tail.head.version)
    except (ConflictError, InvalidMessageError):
        return  # written meanwhile: the next run sees it again

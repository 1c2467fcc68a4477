"""Make one conversation of a target what it is in a source: :func:`sync_key`.

Idempotent and resumable by message and record ids (a store keeps a saved id once):

1. The target's messages are compared with the source's by id. When they are a prefix (a
   fresh target, or a copy cut short by a kill), only what is missing is written: the
   remaining messages in batches (each atomic) and the missing records, interleaved in the
   source's sequence order, so records keep their place among the messages. When they are
   not (the target was written apart, a ``replace`` or a purge ran on one side only, a
   mirror began after the conversation did), or its records are not the source's first ones
   in their places, the target's record is replaced by the source's (``replace``: one atomic
   write) or, when the target holds records or cannot replace, deleted and copied again.
2. The summary checkpoint is copied with ``covers_to`` remapped to the target's sequence
   number of the same message (sequence numbers are each store's own) and the target's
   epoch, by compare-and-set; an identical one (same summarizer, time, covered message and
   summary ids) is left alone. A checkpoint only the target has is dropped (``replace`` with
   its own messages), so both serve the same view.
3. A conversation the source does not hold is deleted from the target.

A conversation's history goes too (:mod:`.replaying`): every checkpoint version (so the
view provenance of each reply is rebuilt from the target) and, for a conversation with
rewinds, the rewinds in their place (the whole history replayed into the emptied target
unless it holds the same already; a rewind copied gets the target's time, so the
``rewound`` marker ``fetch_all_chats`` puts on the same messages holds the copy's time).

Writes go through the target side's layers (a ``scrub::`` target scrubs again, which
changes nothing on scrubbed data; an ``encrypt::`` target seals with its own keys).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import anyio
import attrs

from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.errors import ConfigError, ConflictError, InvalidMessageError
from storage.message import ChatKey, ChatMessage
from storage.migrate.replaying import replay, same_history, save_versions
from storage.migrate.sides import Side, Snapshot, read_snapshot

__all__ = ["BATCH", "KeyCopy", "sync_key"]

BATCH = 500
"""Messages per ``save_messages`` call (each batch is atomic; a kill loses no batch)."""
_ATTEMPTS = 5
_PAUSE = 0.05
"""Seconds before a copy's second attempt after a concurrent write, doubled each time."""


@attrs.define
class KeyCopy:
    """What :func:`sync_key` did to one conversation.

    Attributes:
        key: the conversation.
        messages: messages in the source; ``messages_copied``: written to the target.
        checkpoint: whether the source has a checkpoint (current, or kept versions of one);
            ``checkpoint_copied``: written.
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


async def sync_key(source: Side, target: Side, key: ChatKey, *, batch: int = BATCH) -> KeyCopy:
    """Make ``key`` on ``target`` hold what it holds on ``source`` (see the module).

    Safe while a ``mirror`` layer writes the same conversation to the target: the target
    is read before the source (a message the mirror wrote to the target after that read is
    one the source held first or changes the target's version), the first write is
    conditional on the target's version (``replace`` / ``save_messages_if``), and the
    target is read back and must be a prefix of the source read after it; a write that
    slipped in between makes it start again, after a pause that doubles (``_ATTEMPTS``
    tries in all).

    Raises:
        ConfigError: the source has a checkpoint or records the target cannot keep.
        ConflictError: the target kept changing while it was written (run it again).
        ChatStorageError: from either store (what was written before stays written).
    """
    for attempt in range(_ATTEMPTS):
        if attempt:  # a live writer: let its burst pass (jittered, so two copies part)
            await anyio.sleep(_PAUSE * 2 ** (attempt - 1) * random.uniform(0.5, 1.5))
        tgt = await read_snapshot(target, key)
        src = await read_snapshot(source, key)
        done = await _sync_once(source, target, key, src, tgt, batch)
        if done is not None:
            return done
    raise ConflictError(f"{key}: the target kept changing while it was copied; run it again")


async def _sync_once(
    source: Side, target: Side, key: ChatKey, src: Snapshot, tgt: Snapshot, batch: int
) -> KeyCopy | None:
    """One attempt of :func:`sync_key`; ``None`` when a concurrent write got in the way."""
    # A checkpoint counts whether current or only kept as versions (a rewind or replace
    # dropped the current one): both are copied.
    has_checkpoint = src.checkpoint is not None or bool(src.versions)
    done = KeyCopy(key, len(src.messages), 0, has_checkpoint, False, len(src.records))
    if src.empty:
        if not tgt.empty:
            await target.storage.delete(key)
            done.deleted = True
        return done
    if src.rewinds or tgt.rewinds:
        return await _sync_history(target, key, src, tgt, batch, done)
    src_ids = [m.id for m in src.messages]
    held = [m.id for m in tgt.messages]
    version = tgt.head.version if tgt.head is not None else None
    try:
        if held != src_ids[: len(held)] or not _records_in_place(src, tgt):
            tgt = await _rewrite(target, key, src.messages, tgt, version)
            done.rewritten = True
            done.messages_copied = len(src.messages) if tgt.messages else 0
            held = [m.id for m in tgt.messages]
            version = None  # written: the order is read back below
        have_records = {r.id for r in tgt.records}
        missing_records = [r for r in src.records if r.id not in have_records]
        if missing_records and target.records is None:
            raise ConfigError(
                f"{target.label} cannot keep conversation records (the source has some)"
            )
        done.messages_copied += await _write(
            target, key, src, len(held), missing_records, batch=batch, version=version
        )
    except ConflictError:
        return None  # the target changed since it was read
    done.records_copied = len(missing_records)
    after = tgt
    if done.changed:  # read back: a write between ours would have broken the order
        after = await read_snapshot(target, key)
        ids = [m.id for m in after.messages]
        # The source read after the target holds whatever a mirror wrote to the target
        # (primary first): the target must be its prefix, or a mirrored write was lost.
        latest = await read_snapshot(source, key)
        if ids[: len(src_ids)] != src_ids or ids != [m.id for m in latest.messages][: len(ids)]:
            return None
        ours, places = src.record_places(), after.record_places()
        if ours is not None and places is not None and places[: len(ours)] != ours:
            return None
    if src.checkpoint is not None and src.versions and target.travel is not None:
        done.checkpoint_copied = await save_versions(target, key, src, after) > 0
    else:
        done.checkpoint_copied = await _sync_checkpoint(target, key, src, after)
    return done


async def _sync_history(
    target: Side, key: ChatKey, src: Snapshot, tgt: Snapshot, batch: int, done: KeyCopy
) -> KeyCopy | None:
    """A key with rewinds (on either side): left alone when the target holds the same
    history, else written again from nothing by replaying the source's
    (:func:`~storage.migrate.replaying.replay`); ``None`` when a write got in the way."""
    if same_history(src, tgt):
        return done
    if tgt.messages or tgt.records or tgt.checkpoint is not None or tgt.versions:
        await target.storage.delete(key)
        done.rewritten = True
    try:
        done.messages_copied, versions = await replay(target, key, src, batch=batch)
    except ConflictError:
        return None
    done.records_copied = len(src.records)
    done.checkpoint_copied = versions > 0
    if not same_history(src, await read_snapshot(target, key)):
        return None
    return done


async def _rewrite(
    target: Side,
    key: ChatKey,
    messages: Sequence[ChatMessage],
    tgt: Snapshot,
    version: str | None,
) -> Snapshot:
    """Make the target's record ``messages`` if its version is still ``version`` (the
    checkpoint goes); returns what the target holds now (messages empty: copy them). A
    target holding records is emptied instead: ``replace`` keeps records at their old
    places, which are not the source's once the messages differ.

    Raises:
        ConflictError: the target was written since ``version``.
    """
    if target.replaceable is not None and not tgt.records:
        try:
            await target.replaceable.replace(key, messages, expected_version=version)
            return attrs.evolve(tgt, messages=tuple(messages), seqs=None, checkpoint=None)
        except InvalidMessageError:
            pass  # a record save accepted but replace's history check refuses: copy it
    await target.storage.delete(key)
    return Snapshot((), None, None, None, ())


def _records_in_place(src: Snapshot, tgt: Snapshot) -> bool:
    """Whether the target's records are a prefix of the source's, each in the same place
    among the messages (the missing ones can then be added after them). A mirror that
    began after a conversation did holds the later records only, before the messages a
    migration adds."""
    ours, theirs = src.record_places(), tgt.record_places()
    if ours is None or theirs is None:
        held = [r.id for r in tgt.records]
        return held == [r.id for r in src.records][: len(held)]
    return theirs == ours[: len(theirs)]


async def _write(
    target: Side,
    key: ChatKey,
    src: Snapshot,
    start: int,
    records: list[ConversationRecord],
    *,
    batch: int,
    version: str | None,
) -> int:
    """Write ``src.messages[start:]`` and ``records`` in the source's sequence order; return
    how many messages were written. The first write is conditional on the target's
    ``version`` when there is one (and the target can compare).

    Raises:
        ConflictError: the target was written since ``version``.
    """
    first: list[str | None] = [version if target.replaceable is not None else None]
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
                written += await _flush(target, key, run, first)
            continue
        written += await _flush(target, key, run, first)
        assert target.records is not None
        if first[0] is not None:  # a record first: compare before writing anything
            await _check_version(target, key, first)
        await target.records.save_record(key, attrs.evolve(item, seq=0))
    written += await _flush(target, key, run, first)
    return written


async def _flush(
    target: Side, key: ChatKey, run: list[ChatMessage], first: list[str | None]
) -> int:
    """Save ``run`` (emptied); the first save of a copy only if the target's version is
    still ``first[0]``."""
    if not run:
        return 0
    count = len(run)
    expected, first[0] = first[0], None
    if expected is not None and target.replaceable is not None:
        await target.replaceable.save_messages_if(key, list(run), expected_version=expected)
    else:
        await target.storage.save_messages(key, list(run))
    run.clear()
    return count


async def _check_version(target: Side, key: ChatKey, first: list[str | None]) -> None:
    expected, first[0] = first[0], None
    if target.sequenced is not None and (await target.sequenced.head(key)).version != expected:
        raise ConflictError(f"{key}: written since version {expected!r}")


def _same_checkpoint(a: SummaryCheckpoint, b: SummaryCheckpoint, covers_to: int) -> bool:
    return (
        a.covers_to == covers_to
        and a.summarizer == b.summarizer
        and a.created_at == b.created_at
        and [m.id for m in a.messages] == [m.id for m in b.messages]
    )


async def _sync_checkpoint(target: Side, key: ChatKey, src: Snapshot, before: Snapshot) -> bool:
    """Copy (or drop) the checkpoint so the target's matches the source's; whether a
    checkpoint was written. ``before``: the target's snapshot, current."""
    if src.checkpoint is None:
        if target.checkpoints is not None and before.checkpoint is not None:
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
        tgt = before if attempt == 0 else await read_snapshot(target, key)
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

"""Copy one conversation's history: its rewinds and its checkpoint versions.

A rewind and a checkpoint version are not rows to copy: each store numbers its own sequence,
epochs and versions, and only ``rewind`` and ``save_checkpoint`` (compare-and-set under the
key's current epoch) make them. So a key with rewinds is copied by replaying its history in
the source's order (:func:`replay`): messages and records up to a rewind, the rewind itself
(``rewind(key, to_id)``, which hides the same messages and gets the copy's own time and
sequence number), and each checkpoint version where it was made: after the message it covers,
within the epoch it was made under (the run of versions between two rewinds it belongs to,
found from its epoch, what it covers and its time). A version a rewind carried over (the same
checkpoint under the rewind's new epoch) is made by the copy's rewind too.

:func:`save_versions` copies the versions of a key without rewinds (one epoch): the ones the
target lacks, oldest first, each one compare-and-set.

A copy is named by what survives it (:func:`same_history`): message ids in order, each
rewind's target, size and place, each version's summarizer, time, covered message and
summary ids, the records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from storage.abilities import ConversationRecord, Rewind, SummaryCheckpoint, TimeTravelStorage
from storage.abilities.forking import EMPTY_VERSION
from storage.errors import ConfigError, ConflictError
from storage.message import ChatKey, ChatMessage
from storage.migrate.sides import Side, Snapshot, read_snapshot

__all__ = ["plan_versions", "replay", "same_history", "save_versions"]

_MESSAGE, _RECORD, _REWIND, _VERSION = 1, 0, 2, 3


def _record_marks(records: Sequence[ConversationRecord]) -> list[tuple[Any, ...]]:
    return [(r.id, r.kind, r.data, r.created_at) for r in records]


def same_history(src: Snapshot, tgt: Snapshot) -> bool:
    """Whether ``tgt`` holds what ``src`` holds (see the module)."""
    return (
        [m.id for m in src.messages] == [m.id for m in tgt.messages]
        and src.rewind_marks() == tgt.rewind_marks()
        and src.version_marks() == tgt.version_marks()
        and (src.checkpoint is None) == (tgt.checkpoint is None)
        and _record_marks(src.records) == _record_marks(tgt.records)
    )


def _same_checkpoint(a: SummaryCheckpoint, b: SummaryCheckpoint) -> bool:
    return (
        a.summarizer == b.summarizer
        and a.created_at == b.created_at
        and a.covers_to == b.covers_to
        and [m.id for m in a.messages] == [m.id for m in b.messages]
    )


def plan_versions(src: Snapshot) -> list[tuple[int, SummaryCheckpoint, bool]]:
    """``(k, version, carried)`` for each version of ``src`` that can be placed: made after
    ``k`` rewinds (before rewind ``k + 1``); ``carried``: made by rewind ``k`` itself."""
    rewinds = src.rewinds
    last = len(rewinds)
    out: list[tuple[int, SummaryCheckpoint, bool]] = []
    run = -1
    prev: SummaryCheckpoint | None = None
    for version in src.versions:
        if prev is not None and version.epoch == prev.epoch:
            out.append((run, version, False))
            prev = version
            continue
        if prev is not None and run < last and _same_checkpoint(version, prev):
            run += 1  # the next rewind kept the checkpoint under its new epoch
            out.append((run, version, True))
            prev = version
            continue
        covers = version.covers_to
        feasible = [
            k
            for k in range(run + 1, last + 1)
            if (k == last or covers < rewinds[k].seq)
            and not any(r.hides(covers) for r in rewinds[:k])
        ]
        if not feasible:
            continue  # made under an epoch this history does not show (a rebuilt head)
        if src.head is not None and version.epoch == src.head.epoch and last in feasible:
            chosen = last
        else:
            timed = [
                k for k in feasible if k == 0 or rewinds[k - 1].created_at <= version.created_at
            ]
            chosen = max(timed) if timed else feasible[0]
        run = chosen
        out.append((run, version, False))
        prev = version
    return out


def _events(src: Snapshot) -> list[tuple[int, int, object]]:
    """The source's history in its order: ``(place, kind, item)``."""
    assert src.seqs is not None
    events: list[tuple[int, int, object]] = [
        (seq, _MESSAGE, m) for seq, m in zip(src.seqs, src.messages, strict=True)
    ]
    events += [(r.seq, _RECORD, r) for r in src.records]
    events += [(r.seq, _REWIND, r) for r in src.rewinds]
    events.sort(key=lambda e: (e[0], e[1]))
    placed: list[tuple[int, int, object]] = []
    floor = 0
    for k, version, carried in plan_versions(src):
        start = src.rewinds[k - 1].seq if k else 0
        floor = max(floor, version.covers_to, start)
        placed.append((floor, _VERSION, (version, carried)))
    # A version goes after every event up to its place (versions keep their order).
    out: list[tuple[int, int, object]] = []
    for event in events:
        while placed and placed[0][0] < event[0]:
            out.append(placed.pop(0))
        out.append(event)
    return out + placed


async def replay(target: Side, key: ChatKey, src: Snapshot, *, batch: int) -> tuple[int, int]:
    """Write ``src``'s history into ``key`` of ``target``, which holds nothing (see the
    module); return (messages written, versions written).

    Raises:
        ConfigError: the target cannot keep rewinds, checkpoints or records it would need.
        ConflictError: the target was written meanwhile (the first write is conditional on
            it being empty), or a rewind hid another number of messages than in the source.
    """
    travel = _able(target, src)
    run: list[ChatMessage] = []
    first = [True]
    written = versions = 0

    async def flush() -> None:
        nonlocal written
        if not run:
            return
        if first[0] and target.replaceable is not None:
            await target.replaceable.save_messages_if(
                key, list(run), expected_version=EMPTY_VERSION
            )
        else:
            await target.storage.save_messages(key, list(run))
        first[0] = False
        written += len(run)
        run.clear()

    for _, kind, item in _events(src):
        if kind == _MESSAGE:
            assert isinstance(item, ChatMessage)
            run.append(item)
            if len(run) >= batch:
                await flush()
            continue
        await flush()
        if kind == _RECORD:
            assert isinstance(item, ConversationRecord)
            assert target.records is not None
            await target.records.save_record(key, attrs.evolve(item, seq=0))
        elif kind == _REWIND:
            assert isinstance(item, Rewind)
            await _rewind(travel, key, item)
        else:
            assert isinstance(item, tuple)
            version: SummaryCheckpoint = item[0]
            carried: bool = item[1]
            versions += await _save_version(target, key, src, version, carried)
    await flush()
    return written, versions


def _able(target: Side, src: Snapshot) -> TimeTravelStorage:
    """The target's time travel, when it can keep all ``src`` holds (else ConfigError)."""
    travel = target.travel
    if travel is None:
        raise ConfigError(f"{target.label} cannot keep rewinds (the source has some)")
    if src.records and target.records is None:
        raise ConfigError(f"{target.label} cannot keep conversation records (the source has some)")
    if src.versions and target.checkpoints is None:
        raise ConfigError(f"{target.label} cannot keep summary checkpoints")
    return travel


async def _rewind(travel: TimeTravelStorage, key: ChatKey, rewind: Rewind) -> None:
    """Make ``rewind`` in the target; it must hide what it hid in the source."""
    hidden = await travel.rewind(key, rewind.to_id)
    if hidden != rewind.hidden:
        raise ConflictError(
            f"{key}: rewinding to {rewind.to_id!r} hid {hidden} messages in the target, "
            f"{rewind.hidden} in the source"
        )


async def _save_version(
    target: Side, key: ChatKey, src: Snapshot, version: SummaryCheckpoint, carried: bool
) -> int:
    """Make ``version`` the target's next checkpoint version (unless a carried one the
    target's rewind made already); 1 when written."""
    assert target.checkpoints is not None
    assert target.travel is not None
    timeline = await target.travel.fetch_timeline(key)
    head = timeline.head
    covered = src.id_at(version.covers_to)
    covers_to = timeline.seq_of(covered) if covered is not None else None
    if covers_to is None:
        raise ConflictError(f"{key}: the message a summary covers is not in the target")
    if carried:
        current = await target.checkpoints.load_checkpoint(key)
        if (
            current is not None
            and _same_checkpoint(current, attrs.evolve(version, covers_to=current.covers_to))
            and current.covers_to == covers_to
        ):
            return 0
    made = SummaryCheckpoint(
        version.messages, covers_to, head.epoch, version.summarizer, version.created_at
    )
    stored = await target.checkpoints.save_checkpoint(
        key, made, expected_version=head.checkpoint_version
    )
    if stored is None:
        raise ConflictError(f"{key}: the target's summary checkpoint changed meanwhile")
    return 1


async def save_versions(target: Side, key: ChatKey, src: Snapshot, tgt: Snapshot) -> int:
    """Copy the versions of a key without rewinds that ``tgt`` (current) lacks; how many
    were written. Versions the target holds that the source does not: the target's are
    dropped first (``replace`` with its own messages) and every version copied.

    Raises:
        ConflictError: the target changed meanwhile.
    """
    assert target.checkpoints is not None
    ours, theirs = src.version_marks(), tgt.version_marks()
    if ours == theirs:
        return 0
    if theirs != ours[: len(theirs)]:
        if target.replaceable is None or target.sequenced is None or tgt.head is None:
            raise ConfigError(
                f"{target.label} holds other summary checkpoints and cannot drop them"
            )
        tail = await target.sequenced.fetch_since(key, 0)
        await target.replaceable.replace(key, tail.messages, expected_version=tail.head.version)
        tgt = await read_snapshot(target, key)
        theirs = []
    assert tgt.head is not None
    assert tgt.seqs is not None
    seq_of = {m.id: seq for m, seq in zip(tgt.messages, tgt.seqs, strict=True)}
    expected = tgt.head.checkpoint_version
    written = 0
    for version in src.versions[len(theirs) :]:
        covered = src.id_at(version.covers_to)
        covers_to = seq_of.get(covered) if covered is not None else None
        if covers_to is None:
            raise ConflictError(f"{key}: the message a summary covers is not in the target")
        made = SummaryCheckpoint(
            version.messages, covers_to, tgt.head.epoch, version.summarizer, version.created_at
        )
        stored = await target.checkpoints.save_checkpoint(key, made, expected_version=expected)
        if stored is None:
            raise ConflictError(f"{key}: the target's summary checkpoint changed meanwhile")
        expected = stored.version
        written += 1
    return written

"""``migrate(source, target)``: copy every conversation of one stack into another.

Every conversation the source lists (``list_keys``) is made the same in the target by
:func:`~storage.migrate.copying.sync_key`: messages with their ids, order and times, records
in their place, the summary checkpoint with ``covers_to`` remapped, so a summarized
conversation serves the same view from the target with no summarizer call. Run it again
after a kill and it copies what is missing (each batch of messages is atomic, every write
idempotent by id); run it on a copy that is complete and it copies nothing.

With ``journal`` (the name a ``mirror`` layer gave its secondary, its URL without the
password), the marks that mirror left in the source's base store are repaired too: a missed
erasure (``delete_user``) or purge is done on the target first, a missed conversation is
copied (or deleted from the target when the source no longer holds it), and each mark is
cleared once repaired (unless a new miss was recorded meanwhile).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import cast

import anyio
import attrs

from storage.config.stack import components
from storage.errors import ConfigError, ConflictError
from storage.message import ChatKey
from storage.migrate.copying import BATCH, KeyCopy, sync_key
from storage.migrate.journal import Journal, Mark
from storage.migrate.sides import Side, key_order, record_side
from storage.protocol import ChatStorage
from storage.telemetry import migration

__all__ = ["MigrationReport", "check_sides", "migrate"]

CONCURRENCY = 4
"""Conversations copied at once (a server round trip overlaps the others)."""


@attrs.define
class MigrationReport:
    """What a migration found and did.

    Attributes:
        keys: conversations in the source; ``keys_changed``: those the target lacked
            something of.
        messages, checkpoints, records: in the source; ``*_copied``: written to the target.
        rewritten: conversations whose target record was replaced (it had diverged).
        deleted: conversations deleted from the target (gone from the source, per a mark).
        marks_repaired: mirror marks repaired and cleared.
        busy: conversations not copied because they were written all through the copy's
            attempts (a live writer on the target: a mirror); each is marked for the
            mirror named by ``journal``, whose next write to it copies it, and the next
            ``migrate`` copies it again. Empty when the migration is complete.
        seconds: wall time of the run.
    """

    keys: int = 0
    keys_changed: int = 0
    messages: int = 0
    messages_copied: int = 0
    checkpoints: int = 0
    checkpoints_copied: int = 0
    records: int = 0
    records_copied: int = 0
    rewritten: int = 0
    deleted: int = 0
    marks_repaired: int = 0
    busy: list[ChatKey] = attrs.field(factory=list)
    seconds: float = 0.0

    def add(self, copy: KeyCopy) -> None:
        if copy.messages or copy.records or copy.checkpoint:
            self.keys += 1
        self.keys_changed += copy.changed
        self.messages += copy.messages
        self.messages_copied += copy.messages_copied
        self.checkpoints += copy.checkpoint
        self.checkpoints_copied += copy.checkpoint_copied
        self.records += copy.records
        self.records_copied += copy.records_copied
        self.rewritten += copy.rewritten
        self.deleted += copy.deleted

    def as_dict(self) -> dict[str, object]:
        """The report as JSON-ready values (``busy``: ``[user_id, session_id, agent_id]``)."""
        found: dict[str, object] = attrs.asdict(self, recurse=False)
        found["busy"] = [[k.user_id, k.session_id, k.agent_id] for k in self.busy]
        return found


def check_sides(source: Side, target: Side) -> None:
    """Refuse a target that cannot keep what the source has.

    Raises:
        ConfigError: the source cannot list its conversations, or it keeps checkpoints or
            records and the target cannot.
    """
    if source.listable is None:
        raise ConfigError(f"{source.label} cannot list its conversations (no list_keys)")
    if source.checkpoints is not None and target.checkpoints is None:
        raise ConfigError(
            f"{target.label} cannot keep summary checkpoints (a summarize:: layer hides them: "
            "give the store, or the layers below summarize::); the conversations would be "
            "summarized again"
        )
    if source.records is not None and target.records is None:
        raise ConfigError(f"{target.label} cannot keep conversation records")


async def migrate(
    source: ChatStorage,
    target: ChatStorage,
    *,
    journal: str | None = None,
    batch: int = BATCH,
    concurrency: int = CONCURRENCY,
    on_key: Callable[[KeyCopy], None] | None = None,
    on_keys: Callable[[int], None] | None = None,
) -> MigrationReport:
    """Copy every conversation of ``source`` into ``target`` (see the module).

    Args:
        source, target: stacks (or stores); each is read and written through its record
            part (:func:`~storage.migrate.sides.record_side`).
        journal: the secondary name of a ``mirror`` layer whose marks to repair.
        batch: messages per atomic batch.
        concurrency: conversations copied at once.
        on_key: called after each conversation; ``on_keys``: with their number, first.

    Raises:
        ConfigError: the source cannot list its conversations, or the target cannot keep
            checkpoints or records the source has.
        ChatStorageError: from either store; what was copied stays copied (run it again).
            A conversation a live writer kept changing does not raise: it is in ``busy``.
    """
    started = time.perf_counter()
    src, tgt = record_side(source), record_side(target)
    check_sides(src, tgt)
    report = MigrationReport()
    marks = await _marks(source, journal)
    for mark, _ in marks:
        if mark.kind != "key":
            await _repair_global(tgt, mark)
    keys = await src.keys()
    listed = set(keys)
    keys += sorted(
        {m.key for m, _ in marks if m.key is not None and m.key not in listed}, key=key_order
    )
    if on_keys is not None:
        on_keys(len(keys))
    limiter = anyio.CapacityLimiter(max(1, concurrency))

    with migration(source, target) as span:

        async def copy(key: ChatKey) -> None:
            async with limiter:
                try:
                    done = await sync_key(src, tgt, key, batch=batch)
                except ConflictError:
                    await _hand_over(source, journal, key)
                    report.busy.append(key)
                    return
            report.add(done)
            span.add("conversations", 1)
            span.add("messages", done.messages_copied)
            span.add("checkpoints", int(done.checkpoint_copied))
            span.add("records", done.records_copied)
            span.add("skipped", done.messages - done.messages_copied)
            if on_key is not None:
                on_key(done)

        async with anyio.create_task_group() as tg:
            for key in keys:
                tg.start_soon(copy, key)
    busy = set(report.busy)
    report.busy.sort(key=key_order)
    for mark, version in marks:
        if mark.key in busy:
            continue  # not copied: the mark stays
        if await _journal(source, journal).clear(mark, version):
            report.marks_repaired += 1
    report.seconds = time.perf_counter() - started
    return report


def _journal(source: ChatStorage, name: str | None) -> Journal:
    assert name is not None
    parts = components(source)
    base = cast(ChatStorage, parts[-1] if parts else source)
    return Journal(base, name)


async def _hand_over(source: ChatStorage, name: str | None, key: ChatKey) -> None:
    """Mark ``key`` for the mirror ``name``: its worker copies the conversation on its next
    write there, under its own lock for the key (so a write of its own cannot come between,
    as one did between every attempt of the copy)."""
    if name is None:
        return
    try:
        journal = _journal(source, name)
    except ConfigError:
        return
    await journal.add(Mark.of_key(key))


async def _marks(source: ChatStorage, name: str | None) -> list[tuple[Mark, str]]:
    """The marks (each with its version, read before any repair) of the mirror journal
    ``name`` in the source's base store."""
    if name is None:
        return []
    try:
        journal = _journal(source, name)
    except ConfigError:
        return []
    return [(mark, await journal.version(mark)) for mark in await journal.marks()]


async def _repair_global(target: Side, mark: Mark) -> None:
    """Do on the target the erasure or purge the mirror's secondary missed."""
    if mark.user_id is not None:
        await target.storage.delete_user(mark.user_id)
    elif mark.at is not None and target.retention is not None:
        await target.retention.purge(now=mark.at)

"""``MirrorChatStorage`` (``mirror::``): every write to the primary and to a secondary store.

See :mod:`storage.layers.mirroring` for the model; this module is the layer itself.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

import anyio
import attrs

from storage.abilities import (
    Abilities,
    CheckpointStorage,
    ConversationRecord,
    DescribableStorage,
    ListableStorage,
    RecordStorage,
    ReplaceableStorage,
    RetentionStorage,
    SearchableStorage,
    SequencedStorage,
    SessionListing,
    SummaryCheckpoint,
    TimeTravelStorage,
    find_ability,
    forward,
)
from storage.config.stack import components, describe_lines
from storage.durations import Duration, PositiveDuration, parse_duration, parse_positive_duration
from storage.errors import ConfigError, ConflictError
from storage.keyed_locks import KeyedLocks
from storage.layers.mirroring.misses import Misses
from storage.message import ChatKey, ChatMessage
from storage.migrate.copying import sync_key
from storage.migrate.journal import Journal, Mark, is_reserved
from storage.migrate.sides import record_side
from storage.protocol import ChatStorage, ChatStorageWrapper
from storage.redact import redact_url
from storage.stores.options import CallableOption

if TYPE_CHECKING:
    from storage.layers.payload import Below

__all__ = ["MirrorChatStorage"]

T = TypeVar("T")
_MIRRORED = (
    SequencedStorage,
    CheckpointStorage,
    ReplaceableStorage,
    RecordStorage,
    RetentionStorage,
    TimeTravelStorage,
)


def _open(what: str, value: object) -> tuple[ChatStorage, str, bool]:
    """A store given as a URL (or config file) or a ``ChatStorage``: ``(store, its name,
    opened here)``."""
    if isinstance(value, str):
        from storage.config import open_storage

        return open_storage(value), redact_url(value), True
    if isinstance(value, ChatStorage):
        return value, " | ".join(describe_lines(value)), False
    raise ConfigError(f"mirror: {what} must be a store URL or a ChatStorage, got {value!r}")


class MirrorChatStorage(ChatStorageWrapper):
    """Send every write to the inner (primary) stack and to a secondary store; read the
    primary. A failure of the secondary never fails the call: it is recorded (a durable
    mark per conversation), logged once per conversation, counted, and repaired on the next
    write to that conversation or by ``chatlayers migrate``.

    Put it directly above the base store, below the scrubbing and encrypting layers
    (``summarize::scrub::mirror?secondary=...::sqlite:///chats.db``): the secondary then
    gets exactly what the primary store keeps (scrubbed, with the primary's ids and times).

    Abilities (what is mirrored, what passes):

    - mirrored (``transforms``): ``CheckpointStorage`` (a saved checkpoint is copied with
      ``covers_to`` remapped to the secondary's sequence numbers; loads and leases go to the
      primary only: the fleet summarizing over the primary coordinates there),
      ``ReplaceableStorage`` (``replace`` as stored by the primary, its compare done there;
      ``save_messages_if`` as a plain save of what the primary stored), ``RecordStorage``
      (saves mirrored, reads from the primary), ``RetentionStorage`` (``purge`` runs on both
      with the same ``now``), ``TimeTravelStorage`` (``rewind`` on both, to the same
      message; ``fork`` on the primary, then the fork copied to the secondary as the primary
      made it; as-of reads, timelines and provenance from the primary),
      ``ListableStorage`` (the primary's keys without the journal's own) and
      ``DescribableStorage``;
    - passed: ``SequencedStorage``, ``SessionListing``, ``SearchableStorage`` (reads, from
      the primary); nothing is hidden.

    Args:
        inner: the primary stack.
        secondary: a store URL (or a chain, or a config file path) or a ``ChatStorage``;
            it must keep what the primary keeps (checkpoints, records, replace, purge when
            the primary has them). Give it the same ``retention`` as the primary.
        journal: where the marks of missed writes live: a store URL or a ``ChatStorage``
            (default: the primary's base store, under a reserved user id; every worker of
            the primary shares it and it survives a restart).
        timeout: seconds one call to the secondary (a repair included) may take (5).
        retry_after: seconds the secondary rests after a failure: writes meanwhile are only
            marked, so an unreachable secondary costs no call its timeout (5).
        recheck: seconds between reads of the journal, so a worker repairs the marks other
            workers left (30).
        clock: seconds since the epoch (``time.time``).

    Attributes:
        secondary: the secondary stack.
        secondary_name: its URL without the password (the journal's name for it).

    Raises:
        ConfigError: a bad ``secondary`` or ``journal``, a secondary lacking an ability
            the primary has, a journal store that cannot list its keys, a bad duration.
    """

    abilities = Abilities(
        passes=(SequencedStorage, SessionListing, SearchableStorage),
        transforms=(
            DescribableStorage,
            ListableStorage,
            CheckpointStorage,
            ReplaceableStorage,
            RecordStorage,
            RetentionStorage,
            TimeTravelStorage,
        ),
    )
    load_checkpoint = forward(CheckpointStorage.load_checkpoint)
    acquire_lease = forward(CheckpointStorage.acquire_lease)
    release_lease = forward(CheckpointStorage.release_lease)
    fetch_records = forward(RecordStorage.fetch_records)
    fetch_as_of = forward(TimeTravelStorage.fetch_as_of)
    fetch_timeline = forward(TimeTravelStorage.fetch_timeline)
    provenance = forward(TimeTravelStorage.provenance)

    def __init__(
        self,
        inner: ChatStorage,
        *,
        secondary: str | ChatStorage,
        journal: str | ChatStorage | None = None,
        timeout: PositiveDuration = 5.0,
        retry_after: Duration = 5.0,
        recheck: Duration = 30.0,
        clock: CallableOption = time.time,
    ) -> None:
        super().__init__(inner)
        self.timeout = parse_positive_duration(timeout)
        self.retry_after = parse_duration(retry_after)
        self.recheck = parse_duration(recheck)
        if not callable(clock):
            raise ConfigError(f"mirror: clock must be a callable, got {clock!r}")
        self.clock = clock
        self.secondary, self.secondary_name, self._own_secondary = _open("secondary", secondary)
        self._primary = cast("Below", inner)
        self._sec = record_side(self.secondary)
        for ability in _MIRRORED:
            if (
                find_ability(inner, ability) is not None
                and find_ability(self._sec.storage, ability) is None
            ):
                raise ConfigError(
                    f"mirror: the secondary {self.secondary_name} does not offer "
                    f"{ability.__name__}, which the primary has: its writes could not be "
                    "mirrored"
                )
        if journal is None:
            store = cast(ChatStorage, (components(inner) or [inner])[-1])
            self._own_journal = False
        else:
            store, _, self._own_journal = _open("journal", journal)
        self._misses = Misses(
            Journal(store, self.secondary_name),
            record_side(inner),
            self._sec,
            timeout=self.timeout,
            recheck=self.recheck,
            clock=clock,
        )
        # One lock per conversation while a write is in flight (so the secondary gets a
        # key's writes in the primary's order).
        self._locks: KeyedLocks[ChatKey] = KeyedLocks()
        self._rest_until = float("-inf")

    # --- counters -----------------------------------------------------------------------

    @property
    def missed(self) -> int:
        """Marks outstanding (conversations, erasures, purges the secondary lacks)."""
        return len(self._misses.marked)

    @property
    def secondary_failures(self) -> int:
        """Writes the secondary failed (each call)."""
        return self._misses.secondary_failures

    @property
    def skipped(self) -> int:
        """Writes not tried on the secondary while it rested after a failure."""
        return self._misses.skipped

    @property
    def repairs(self) -> int:
        """Marks repaired (the secondary holds what the primary holds)."""
        return self._misses.repairs

    @property
    def repair_failures(self) -> int:
        """Repairs that failed (the mark stays)."""
        return self._misses.repair_failures

    @property
    def journal_failures(self) -> int:
        """Marks that could not be written to the journal (kept in memory)."""
        return self._misses.journal_failures

    async def repair(self) -> int:
        """Repair every mark now (the journal read first); return how many were repaired."""
        return await self._misses.repair_all()

    # --- following the primary ----------------------------------------------------------

    def _resting(self) -> bool:
        return self.clock() < self._rest_until

    async def _follow(
        self, mark: Mark, op: Callable[[], Awaitable[object]] | None, pending: list[Mark]
    ) -> None:
        """After the primary did a write: repair what ``mark``'s write depends on, or do
        ``op`` on the secondary; what the secondary did not get is marked."""
        misses = self._misses
        await misses.refresh()
        pending = [m for m in pending if m in misses.marked]
        if not pending and op is None:
            return
        if self._resting():
            await misses.missed(mark, None)
            return
        try:
            with anyio.fail_after(self.timeout):
                if pending:  # a repair copies the whole conversation, this write included
                    for earlier in pending:
                        await self._repair_one(earlier)
                else:
                    assert op is not None
                    await op()
        except Exception as exc:
            self._rest_until = self.clock() + self.retry_after
            await misses.missed(mark, exc)
        except BaseException:  # cancelled: recorded all the same (a shielded write)
            misses.missed_in_memory(mark)
            await misses.flush()
            raise

    async def _repair_one(self, mark: Mark) -> None:
        if not await self._misses.repair(mark) and mark in self._misses.marked:
            error = self._misses.last_error
            if error is not None:
                raise error

    def _key_pending(self, key: ChatKey) -> list[Mark]:
        return [Mark.of_user(key.user_id), Mark.of_key(key)]

    def _need(self, found: T | None) -> T:
        if found is None:  # pragma: no cover - refused when the layer is made
            raise ConfigError(f"mirror: the secondary {self.secondary_name} lacks this ability")
        return found

    # --- ChatStorage ----------------------------------------------------------------------

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        async with self._locks.hold(key):
            stored = await self.inner.save(key, message)
            await self._follow(Mark.of_key(key), self._saver(key, stored), self._key_pending(key))
        return stored

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        async with self._locks.hold(key):
            stored = await self.inner.save_messages(key, messages)
            await self._follow(Mark.of_key(key), self._saver(key, stored), self._key_pending(key))
        return stored

    def _saver(
        self, key: ChatKey, stored: list[ChatMessage]
    ) -> Callable[[], Awaitable[object]] | None:
        if not stored:
            return None  # retries and dropped messages: nothing new to send
        return lambda: self._sec.storage.save_messages(key, stored)

    async def delete(self, key: ChatKey) -> None:
        async with self._locks.hold(key):
            await self.inner.delete(key)
            await self._follow(
                Mark.of_key(key), lambda: self._sec.storage.delete(key), self._key_pending(key)
            )

    async def delete_user(self, user_id: str) -> None:
        await self.inner.delete_user(user_id)
        mark = Mark.of_user(user_id)
        await self._follow(mark, lambda: self._sec.storage.delete_user(user_id), [mark])

    async def aclose(self) -> None:
        try:
            await self._misses.flush()  # before the journal's store is closed
        finally:
            await self._close()

    async def _close(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            if self._own_secondary:
                await _quietly(self.secondary.aclose)
            if self._own_journal:
                await _quietly(self._misses.journal.store.aclose)

    # --- abilities ------------------------------------------------------------------------

    async def list_keys(
        self, user_id: str | None = None, session_id: str | None = None
    ) -> list[ChatKey]:
        """The primary's keys, without the journal's own."""
        if user_id is not None and is_reserved(user_id):
            return []
        keys = await self._primary.list_keys(user_id, session_id)
        return [key for key in keys if not is_reserved(key.user_id)]

    async def save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, *, expected_version: int
    ) -> SummaryCheckpoint | None:
        async with self._locks.hold(key):
            stored = await self._primary.save_checkpoint(
                key, checkpoint, expected_version=expected_version
            )
            if stored is not None:
                await self._follow(
                    Mark.of_key(key),
                    lambda: self._mirror_checkpoint(key, stored),
                    self._key_pending(key),
                )
        return stored

    async def _mirror_checkpoint(self, key: ChatKey, stored: SummaryCheckpoint) -> None:
        """The primary's checkpoint on the secondary, covering the same message (found by
        id: sequence numbers are each store's own)."""
        tail = await self._primary.fetch_since(key, max(0, stored.covers_to - 1))
        covered = [
            m for m, s in zip(tail.messages, tail.seqs, strict=True) if s == stored.covers_to
        ]
        if not covered:
            raise ConflictError(f"{key}: the summarized message is gone from the primary")
        seq = await self._secondary_seq(key, covered[0].id, len(tail.messages))
        sequenced = self._need(self._sec.sequenced)
        head = await sequenced.head(key)
        made = SummaryCheckpoint(
            stored.messages, seq, head.epoch, stored.summarizer, stored.created_at
        )
        checkpoints = self._need(self._sec.checkpoints)
        if (
            await checkpoints.save_checkpoint(key, made, expected_version=head.checkpoint_version)
            is None
        ):
            raise ConflictError(f"{key}: the secondary's checkpoint changed meanwhile")

    async def _secondary_seq(self, key: ChatKey, message_id: str, count: int) -> int:
        """The secondary's sequence number of ``message_id``, about ``count`` messages from
        the end: read from the end, widening the range until it is found."""
        sequenced = self._need(self._sec.sequenced)
        head = await sequenced.head(key)
        span = max(count, 1)
        while True:
            after = max(0, head.last_seq - span)
            tail = await sequenced.fetch_since(key, after)
            for message, seq in zip(tail.messages, tail.seqs, strict=True):
                if message.id == message_id:
                    return seq
            if after == 0:
                raise ConflictError(f"{key}: the secondary lacks the summarized message")
            span *= 8

    async def replace(
        self,
        key: ChatKey,
        messages: Sequence[ChatMessage],
        *,
        expected_version: str | None = None,
    ) -> list[ChatMessage]:
        async with self._locks.hold(key):
            stored = await self._primary.replace(key, messages, expected_version=expected_version)
            replaceable = self._need(self._sec.replaceable)
            await self._follow(
                Mark.of_key(key),
                lambda: replaceable.replace(key, stored),
                self._key_pending(key),
            )
        return stored

    async def save_messages_if(
        self, key: ChatKey, messages: Sequence[ChatMessage], *, expected_version: str
    ) -> list[ChatMessage]:
        async with self._locks.hold(key):
            stored = await self._primary.save_messages_if(
                key, messages, expected_version=expected_version
            )
            await self._follow(Mark.of_key(key), self._saver(key, stored), self._key_pending(key))
        return stored

    async def save_record(self, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
        async with self._locks.hold(key):
            stored = await self._primary.save_record(key, record)
            records = self._need(self._sec.records)
            await self._follow(
                Mark.of_key(key),
                lambda: records.save_record(key, attrs.evolve(stored, seq=0)),
                self._key_pending(key),
            )
        return stored

    async def purge(self, *, now: datetime | None = None) -> int:
        """Purge the primary, then the secondary with the same ``now`` (each by its own
        ``retention``); earlier purges the secondary missed are covered by this one."""
        at = now if now is not None else datetime.fromtimestamp(self.clock(), UTC)
        count = await self._primary.purge(now=now)
        retention = self._need(self._sec.retention)
        mark = Mark.of_purge(at)
        await self._follow(mark, lambda: retention.purge(now=now), [])
        if mark not in self._misses.marked:
            for earlier in self._misses.purges_before(at):
                await self._misses.repair(earlier)
        return count

    async def rewind(self, key: ChatKey, to: str) -> int:
        """Rewind the primary, then the secondary to the same message (it holds the same
        record, so the same messages are hidden; one that differs is marked and repaired,
        the history copied again)."""
        async with self._locks.hold(key):
            hidden = await self._primary.rewind(key, to)
            if hidden:
                travel = self._need(self._sec.travel)

                async def follow() -> None:
                    there = await travel.rewind(key, to)
                    if there != hidden:
                        raise ConflictError(
                            f"{key}: rewinding to {to!r} hid {there} messages on the secondary, "
                            f"{hidden} on the primary"
                        )

                await self._follow(Mark.of_key(key), follow, self._key_pending(key))
        return hidden

    async def fork(self, key: ChatKey, new_key: ChatKey, *, at: str | None = None) -> int:
        """Fork on the primary, then copy the fork as the primary made it to the secondary
        (its messages and carried checkpoint: :func:`~storage.migrate.copying.sync_key`), so
        the secondary never forks from a copy of ``key`` that lags behind."""
        async with self._locks.hold(new_key):
            copied = await self._primary.fork(key, new_key, at=at)
            await self._follow(
                Mark.of_key(new_key),
                lambda: sync_key(self._misses.primary, self._sec, new_key),
                self._key_pending(new_key),
            )
        return copied

    def describe(self) -> str:
        return (
            f"MirrorChatStorage(secondary={self.secondary_name}, timeout={self.timeout:g}s, "
            f"retry_after={self.retry_after:g}s)"
        )


async def _quietly(close: Callable[[], Awaitable[Any]]) -> None:
    with contextlib.suppress(Exception):  # closing a secondary that is down never fails
        await close()

"""What a mirror's secondary missed, and the repair of it: :class:`Misses`.

The durable marks are in a :class:`~storage.migrate.journal.Journal` (by default in the
primary's base store); this keeps the set a worker knows (read again every ``recheck``
seconds, so marks made by other workers are seen), logs each mark once until it is
repaired, and counts. A repair makes the secondary's copy what the primary holds
(:func:`~storage.migrate.copying.sync_key`), then clears the mark with compare-and-replace
on the version read before the repair started.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

import anyio

from storage.message import ChatKey
from storage.migrate.copying import sync_key
from storage.migrate.journal import Journal, Mark
from storage.migrate.sides import Side

__all__ = ["Misses"]

log = logging.getLogger("storage.layers.mirroring")


class Misses:
    """The marks one mirror knows of, their repair and the counters.

    Args:
        journal: where the marks live.
        primary, secondary: the two sides a repair copies between.
        timeout: seconds one repair may take.
        recheck: seconds between reads of the journal.
        clock: seconds since the epoch.

    Attributes:
        secondary_failures: writes the secondary missed (each call).
        skipped: writes not even tried while the secondary was resting after a failure.
        repairs: marks repaired and cleared; ``repair_failures``: repairs that failed.
        journal_failures: marks that could not be recorded durably (kept in memory).
    """

    def __init__(
        self,
        journal: Journal,
        primary: Side,
        secondary: Side,
        *,
        timeout: float,
        recheck: float,
        clock: Callable[[], float],
    ) -> None:
        self.journal = journal
        self.primary = primary
        self.secondary = secondary
        self.timeout = timeout
        self.recheck = recheck
        self.clock = clock
        self.marked: set[Mark] = set()
        self._unrecorded: set[Mark] = set()
        self._logged: set[Mark] = set()
        self._next_read = float("-inf")
        self.secondary_failures = 0
        self.skipped = 0
        self.repairs = 0
        self.repair_failures = 0
        self.journal_failures = 0
        self.last_error: Exception | None = None

    # --- knowing ------------------------------------------------------------------------

    async def refresh(self, *, force: bool = False) -> None:
        """Read the journal again when ``recheck`` seconds have passed (or ``force``);
        marks that could not be recorded are recorded now."""
        now = self.clock()
        if not force and now < self._next_read:
            return
        self._next_read = now + self.recheck
        try:
            await self._record_unrecorded()
            self.marked = set(await self.journal.marks()) | self._unrecorded
        except Exception as exc:
            log.warning("mirror: cannot read the journal of missed writes: %s", exc)

    async def _record_unrecorded(self) -> None:
        for mark in list(self._unrecorded):
            await self.journal.add(mark)
            self._unrecorded.discard(mark)

    async def flush(self) -> None:
        """Record the marks kept in memory only, in at most ``timeout`` seconds, even in a
        cancelled task (the write is shielded): a mark this worker alone knows is lost when
        it stops, and the secondary would miss that write for good (the next write to the
        key sends only its own messages). A failure keeps them in memory (logged)."""
        if not self._unrecorded:
            return
        with anyio.move_on_after(self.timeout, shield=True):
            try:
                await self._record_unrecorded()
            except Exception as exc:
                log.error(
                    "mirror: cannot record %d missed writes in the journal (%s); the secondary "
                    "lacks them until chatlayers migrate copies them",
                    len(self._unrecorded),
                    exc,
                )

    def pending(self, key: ChatKey) -> list[Mark]:
        """The marks a write to ``key`` repairs first (its user's erasure, then the key)."""
        found = [m for m in (Mark.of_user(key.user_id), Mark.of_key(key)) if m in self.marked]
        return found

    # --- missing ------------------------------------------------------------------------

    async def missed(self, mark: Mark, error: BaseException | None) -> None:
        """Record that the secondary missed ``mark`` (``error``: why; ``None``: skipped)."""
        if error is None:
            self.skipped += 1
        else:
            self.secondary_failures += 1
        self.marked.add(mark)
        if mark not in self._logged:
            self._logged.add(mark)
            why = f"{type(error).__name__}: {error}" if error is not None else "it is resting"
            log.warning(
                "mirror: the secondary %s missed the %s (%s); it is repaired on the next write "
                "there or by chatlayers migrate",
                self.journal.name,
                mark.describe(),
                why,
            )
        try:
            await self.journal.add(mark)
        except Exception as exc:
            self.journal_failures += 1
            self._unrecorded.add(mark)
            log.error(
                "mirror: cannot record that the secondary missed the %s (%s); kept in memory "
                "until the journal can be written",
                mark.describe(),
                exc,
            )

    def missed_in_memory(self, mark: Mark) -> None:
        """A write cancelled before the secondary got it: kept here until :meth:`flush`
        (or the next :meth:`refresh`) records it."""
        self.marked.add(mark)
        self._unrecorded.add(mark)

    # --- repairing ----------------------------------------------------------------------

    async def repair(self, mark: Mark) -> bool:
        """Make the secondary hold what the primary holds for ``mark``, then clear it.

        Returns:
            True when repaired and cleared; False when it failed (the mark stays, the
            failure is counted, logged and kept in :attr:`last_error`) or a new miss was
            recorded meanwhile (``last_error`` is ``None``).
        """
        self.last_error = None
        try:
            version = await self.journal.version(mark)
            with anyio.fail_after(self.timeout):
                await self._make_same(mark)
        except Exception as exc:
            self.repair_failures += 1
            self.last_error = exc
            log.debug("mirror: repair of the %s failed: %s", mark.describe(), exc)
            return False
        try:
            cleared = await self.journal.clear(mark, version)
        except Exception as exc:
            log.warning("mirror: cannot clear the mark of the %s: %s", mark.describe(), exc)
            return False
        if cleared:
            self.marked.discard(mark)
            self._unrecorded.discard(mark)
            self._logged.discard(mark)
            self.repairs += 1
            log.info("mirror: the secondary has the %s again", mark.describe())
        return cleared

    async def _make_same(self, mark: Mark) -> None:
        if mark.key is not None:
            await sync_key(self.primary, self.secondary, mark.key)
        elif mark.user_id is not None:
            await self.secondary.storage.delete_user(mark.user_id)
            for key in await self.primary.keys(mark.user_id):
                await sync_key(self.primary, self.secondary, key)
        elif mark.at is not None and self.secondary.retention is not None:
            await self.secondary.retention.purge(now=mark.at)

    async def repair_all(self) -> int:
        """Repair every mark the journal holds; return how many were repaired."""
        await self.refresh(force=True)
        order = {"user": 0, "purge": 1, "key": 2}  # an erasure before the keys it covers
        done = 0
        for mark in sorted(self.marked, key=lambda m: (order[m.kind], m.encode())):
            done += await self.repair(mark)
        return done

    def purges_before(self, at: datetime) -> list[Mark]:
        """The purge marks a purge at ``at`` covers (cut-offs only move forward)."""
        return [m for m in self.marked if m.at is not None and m.at <= at.astimezone(UTC)]

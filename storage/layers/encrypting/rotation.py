"""Key rotation and status: re-wrap every data key under the newest master key.

Rotation touches only the keyring: each data key is unwrapped with the master key that
wrapped it and wrapped again with the newest one (a compare-and-set per entry, so a
concurrent erasure always wins); no message is rewritten, since messages are sealed with the
data keys, which do not change. Afterwards the old master key can be removed.

It is online: the new wrappings of a batch are computed first, then written in one short
write (:meth:`~.keyring_base.Keyring.rewrap_many`, one transaction of a SQLite keyring),
sized to hold the keyring's write lock a few milliseconds, with a pause after each batch so
that the workers' own keyring writes (new users, erasures) get in between. Killed at any
point, it loses nothing (a batch is all or nothing) and the next run does the rest.
"""

from __future__ import annotations

import time
from typing import Final

import anyio
import attrs

from storage.errors import ConfigError
from storage.layers.encrypting.keyring import Keyring, WrappedKey
from storage.layers.encrypting.master import MasterKeys

__all__ = ["KeyStatus", "RotationResult", "key_status", "rotate_keys"]

_FIRST_BATCH: Final = 64
_MAX_BATCH: Final = 2048


@attrs.frozen
class KeyStatus:
    """How many data keys each master key wraps.

    Attributes:
        data_keys: entries in the keyring.
        by_master: ``(fingerprint, count, position)`` per master key seen in the keyring or
            configured, newest configured first; ``position`` is the key's place in the
            configuration (1 = newest) or ``None`` when it is not configured (those data
            keys cannot be read until it is given back).
    """

    data_keys: int
    by_master: tuple[tuple[str, int, int | None], ...]

    @property
    def unreadable(self) -> int:
        """Data keys wrapped by a master key that is not configured."""
        return sum(count for _, count, position in self.by_master if position is None)


@attrs.frozen
class RotationResult:
    """What a rotation did: entries re-wrapped, already under the newest key, and skipped
    because they changed or were erased meanwhile."""

    rewrapped: int
    current: int
    skipped: int


async def key_status(keyring: Keyring, masters: MasterKeys) -> KeyStatus:
    """Count the keyring's entries by wrapping master key (fingerprints only)."""
    entries = await keyring.entries()
    counts: dict[str, int] = {}
    for entry in entries:
        counts[entry.master] = counts.get(entry.master, 0) + 1
    rows: list[tuple[str, int, int | None]] = [
        (fp, counts.pop(fp, 0), position) for position, fp in enumerate(masters.fingerprints(), 1)
    ]
    rows += [(fp, count, None) for fp, count in sorted(counts.items())]
    return KeyStatus(len(entries), tuple(rows))


async def rotate_keys(
    keyring: Keyring,
    masters: MasterKeys,
    *,
    hold: float = 0.004,
    pause: float = 0.006,
) -> RotationResult:
    """Re-wrap every data key not wrapped by the newest master key, in batches.

    Args:
        keyring: the keyring.
        masters: the configured master keys (the newest wraps).
        hold: seconds one batch should hold the keyring's write lock (the batch size
            follows it).
        pause: seconds to wait after each batch, so other writers get in.

    Raises:
        ConfigError: an entry is wrapped by a master key that is not configured (nothing
            is changed for it; configure the old key after the new one and run again).
        CorruptRecordError: an entry does not authenticate under its master key.
    """
    newest = masters.newest
    rewrapped = current = skipped = 0
    missing: set[str] = set()
    pending: list[WrappedKey] = []
    for entry in await keyring.entries():
        if entry.master == newest.fingerprint:
            current += 1
        elif masters.find(entry.master) is None:
            missing.add(entry.master)
        else:
            pending.append(entry)
    size = _FIRST_BATCH
    start = 0
    while start < len(pending):
        batch = pending[start : start + size]
        start += len(batch)
        pairs = []
        for entry in batch:
            old = masters.find(entry.master)
            assert old is not None
            secret = old.unwrap(entry.user_id, entry.key_id, entry.wrapped)
            wrapped = newest.wrap(entry.user_id, entry.key_id, secret)
            fresh = WrappedKey(entry.user_id, entry.key_id, newest.fingerprint, wrapped)
            pairs.append((fresh, entry))
        began = time.perf_counter()
        done = await keyring.rewrap_many(pairs)
        took = time.perf_counter() - began
        rewrapped += done
        skipped += len(pairs) - done
        # Aim the next batch at ``hold`` seconds under the lock.
        if took > hold:
            size = max(1, size // 2)
        elif took < hold / 2:
            size = min(_MAX_BATCH, size * 2)
        if start < len(pending):
            await anyio.sleep(max(pause, took))
    if missing:
        raise ConfigError(
            f"keys rotate: {rewrapped} data keys re-wrapped, but some are wrapped by master "
            f"key(s) {', '.join(sorted(missing))}, which {masters.source} does not hold; "
            "add them after the newest key and run rotate again"
        )
    return RotationResult(rewrapped, current, skipped)

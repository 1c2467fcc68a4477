"""Key rotation and status: re-wrap every data key under the newest master key.

Rotation touches only the keyring: each data key is unwrapped with the master key that
wrapped it and wrapped again with the newest one (a compare-and-set per entry, so a
concurrent erasure always wins); no message is rewritten, since messages are sealed with the
data keys, which do not change. Afterwards the old master key can be removed.

It is online: the new wrappings of a batch are computed first, then written in one short
write (:meth:`~.keyring_base.Keyring.rewrap_many`, one transaction of a SQLite keyring,
about a millisecond for the default 256 entries), followed by a pause at least as long as
the write took, so that the workers' own keyring writes (new users, erasures) get in
between: the rotation holds the keyring's write lock at most half the time, a few
milliseconds at once. Killed at any point, it loses nothing (a batch is all or nothing) and
the next run does the rest.
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

_BATCH: Final = 256


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
    batch: int = _BATCH,
    pause: float = 0.005,
) -> RotationResult:
    """Re-wrap every data key not wrapped by the newest master key, in batches.

    Args:
        keyring: the keyring.
        masters: the configured master keys (the newest wraps).
        batch: entries re-wrapped per write.
        pause: seconds to wait at least after each batch (longer when the write took
            longer), so other writers get in.

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
    if type(batch) is not int or batch < 1:
        raise ConfigError(f"keys rotate: batch must be an int >= 1, got {batch!r}")
    for start in range(0, len(pending), batch):
        pairs = []
        for entry in pending[start : start + batch]:
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
        if start + batch < len(pending):
            await anyio.sleep(max(pause, took))
    if missing:
        raise ConfigError(
            f"keys rotate: {rewrapped} data keys re-wrapped, but some are wrapped by master "
            f"key(s) {', '.join(sorted(missing))}, which {masters.source} does not hold; "
            "add them after the newest key and run rotate again"
        )
    return RotationResult(rewrapped, current, skipped)

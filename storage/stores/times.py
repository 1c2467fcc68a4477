"""Time in the stores: exact microseconds since the Unix epoch, and the store's clock.

Stores keep times as integer microseconds (SQLite columns, JSONL summaries, Redis heads and
scores, session cursors): :func:`to_us` is exact (no float rounding, so a time written and
read back compares equal), :func:`from_us` its inverse in UTC. A store's ``clock`` option is
``Callable[[], float]`` of epoch seconds (``time.time`` by default, :class:`storage.testing.
FakeClock` in tests); :func:`clock_now` reads it as an aware UTC datetime.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Final

__all__ = ["EPOCH", "Clock", "clock_now", "from_us", "to_us"]

#: The Unix epoch, aware (UTC).
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_US: Final = timedelta(microseconds=1)

#: A clock: seconds since the Unix epoch, like ``time.time``.
Clock = Callable[[], float]


def to_us(moment: datetime) -> int:
    """Microseconds since the Unix epoch of an aware datetime, exactly."""
    return (moment - EPOCH) // _US


def from_us(us: int) -> datetime:
    """The UTC datetime ``us`` microseconds after the Unix epoch (inverse of :func:`to_us`)."""
    return EPOCH + us * _US


def clock_now(clock: Clock | None = None) -> datetime:
    """The time of ``clock`` (default ``time.time``) as an aware UTC datetime."""
    return datetime.fromtimestamp((clock or time.time)(), UTC)

"""Derived records: what a store keeps beside the raw record, and what it does when one breaks.

A store derives things from its raw messages: summary checkpoints, per-key heads and epochs,
per-session tallies behind ``list_sessions``, a search index, a format marker. None of them is
the truth; the raw messages are. So a derived record that cannot be read (bad JSON, the wrong
shape, a message that does not decode, a newer or unknown format version) or that disagrees
with the raw record never hides it: the store logs it once per record, counts it
(``BaseStore.corrupt_derived``) and ignores it or rebuilds it from the raw record. Only the raw
record's own corruption raises ``CorruptRecordError``.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Final

__all__ = ["DerivedLog"]

log = logging.getLogger("storage.stores.derived")

_MAX_REMEMBERED: Final = 10_000  # distinct records logged before the memory starts over


class DerivedLog:
    """Counts the derived records a store found unreadable and logs each one once.

    Attributes:
        count: how many times a derived record was ignored or rebuilt (every read that met
            one counts; a metric to alert on).
        kinds: the same count by what was broken (``"checkpoint"``, ``"head"``,
            ``"session tally"``, ``"search index"``, ...).
    """

    __slots__ = ("_lock", "_seen", "count", "kinds")

    def __init__(self) -> None:
        self.count = 0
        self.kinds: Counter[str] = Counter()
        self._seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()  # file stores report from worker threads too

    def unreadable(self, store: str, what: str, where: str, detail: object) -> None:
        """Count one broken ``what`` of ``where`` (a key, a session, a file) and log it the
        first time this store meets it."""
        with self._lock:
            self.count += 1
            self.kinds[what] += 1
            mark = (what, where)
            if mark in self._seen:
                return
            if len(self._seen) >= _MAX_REMEMBERED:
                self._seen.clear()
            self._seen.add(mark)
        log.warning(
            "%s: the %s of %s could not be used (%s); ignored, and rebuilt from the raw record",
            store,
            what,
            where,
            detail,
        )

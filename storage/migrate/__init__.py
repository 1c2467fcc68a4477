"""Move conversations between stacks and check the copy: ``migrate`` and ``verify``.

- :func:`migrate` (``chatlayers migrate --from URL --to URL``) copies every conversation
  with its message ids, order and times, its records and its summary checkpoint
  (``covers_to`` remapped to the target's sequence numbers), so a summarized conversation
  serves the same view from the target with no summarizer call; resumable after a kill,
  idempotent (:mod:`.running`, one conversation: :mod:`.copying`);
- :func:`verify` (``chatlayers verify``) compares key by key and names the first
  difference (:mod:`.comparing`);
- :mod:`.sides`: which component of a stack holds the record, and one conversation's
  snapshot; :mod:`.journal`: the marks a ``mirror`` layer leaves for what its secondary
  missed, which the mirror and ``migrate`` repair.
"""

from __future__ import annotations

from storage.migrate.comparing import Difference, VerifyReport, verify
from storage.migrate.copying import KeyCopy, sync_key
from storage.migrate.running import MigrationReport, migrate
from storage.migrate.sides import Side, Snapshot, read_snapshot, record_side

__all__ = [
    "Difference",
    "KeyCopy",
    "MigrationReport",
    "Side",
    "Snapshot",
    "VerifyReport",
    "migrate",
    "read_snapshot",
    "record_side",
    "sync_key",
    "verify",
]

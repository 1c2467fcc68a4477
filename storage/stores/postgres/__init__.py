"""``postgresql://USER:PASSWORD@HOST:PORT/DB``: conversations in PostgreSQL (asyncpg).

Layout (schema version 2; :mod:`.schema`), every name derived from the ``table`` option:

- ``<table>``: one row per message: ``key_seq`` (the per-key sequence), ``seq`` (a global
  ``bigserial``: save order between keys, the tie-break of ``fetch_all_chats``), the key,
  the message id, ``created_at``, the record (``storage.codec``'s JSON in a ``text`` column)
  and a ``tsvector`` of its words. Indexes: unique ``(user_id, session_id, agent_id,
  key_seq)`` (fetch, ``fetch(limit)``, heads and tails are index range reads), unique
  ``(user_id, session_id, agent_id, message_id)`` (idempotent saves), ``created_at``
  (retention), GIN on the words (search).
- ``<table>_keys``: one row per key: the last sequence number given, the epoch, and the
  key's message count and first/last ``created_at``. Its row lock orders the key's writers.
- ``<table>_sessions``: one summary row per session (``list_sessions``), indexed by
  ``(user_id, last_at DESC, session_id)``.
- ``<table>_checkpoints``, ``<table>_leases``, ``<table>_records``: summary checkpoints,
  summarizing leases, application records; ``<table>_version``: the schema version.

**Ordering.** A write takes the key's row lock, numbers its batch ``last_seq + 1 .. n`` and
commits; the next writer of the key waits for the lock. So a batch's messages are adjacent in
``fetch`` order whatever runs concurrently, and per-key numbers follow commit order: a reader
tailing by sequence (``fetch_since``) never misses a row committed late with a smaller
number. (``bigserial`` alone draws numbers row by row across concurrent statements, so
concurrent batches interleaved and a late commit could land below a reader's position: the
defect schema version 2 fixes.) Ordering never depends on physical position, so ``VACUUM
FULL`` or any row move changes nothing. Each write is one call of a server-side function
(:mod:`.functions`): one round trip, atomic.

**Payload.** ``text``, not ``jsonb``: ``jsonb`` made every fetch about 1.2x slower
(``python -m benchmarks.postgres_payload``), reorders object keys, turns ``1e100`` into an
integer and rejects ``\\u0000``. ``text`` cannot hold NUL, but the JSON record never contains
one (NUL is written as the escape ``\\u0000``), key parts cannot hold NUL, and a NUL in a
message id, record id or kind or a lease owner is escaped (``\\0``) in its column: NUL
anywhere in a message round-trips exactly and never reaches the server. To query records in
SQL, cast: ``record::jsonb`` (fails only on records holding NUL).

**Schema versions.** Created on first use (or by :meth:`PostgresChatStorage.open`) under an
advisory lock, migrated forward from version 1 (chatlayers 0.1's single table). A database
written by a newer chatlayers is refused on open with ``SchemaVersionError`` naming both
versions, and never written.

**Erasure.** ``delete``/``delete_user`` remove every row holding the text; what remains in
dead tuples, WAL and backups, and what a DBA does about it, is in :mod:`.erasure`
(``await store.vacuum()`` runs ``VACUUM FULL`` on the store's tables).

Modules: :mod:`.store` (the class: options and hooks), :mod:`.context` (the pool and what
the modules share), :mod:`.schema`, :mod:`.functions` and :mod:`.statements` (the SQL),
:mod:`.writes` (saves, replace with compare-and-replace, deletes), :mod:`.sequenced` (heads
and tails), :mod:`.checkpoints` (checkpoints and leases), :mod:`.sessions`, :mod:`.search`,
:mod:`.records`, :mod:`.retention`, :mod:`.derived` (rebuilding key and session rows),
:mod:`.erasure`, :mod:`.names` and :mod:`.text`.

Needs PostgreSQL 13 or newer (``gen_random_uuid``, ``websearch_to_tsquery``; tested on 15)
and a login that may create tables and functions in its schema. asyncpg is asyncio-only, and
so is this store (under trio it raises ``ConfigError``).
"""

from __future__ import annotations

from storage.stores.postgres.schema import MIGRATIONS, SCHEMA_VERSION
from storage.stores.postgres.store import PostgresChatStorage

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "PostgresChatStorage"]

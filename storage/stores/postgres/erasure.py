"""Erasure on PostgreSQL: what ``delete``/``delete_user`` remove, and what remains for a DBA.

``delete`` and ``delete_user`` remove, in one transaction, every row holding the
conversation's text or key: messages (with their search vectors), records, checkpoints and
their versions, rewinds, leases, the key's row and the session summary. After they return
no query can read the text.

PostgreSQL keeps copies of deleted rows outside the live tables until they are overwritten:

- **dead tuples**: a deleted row stays in its heap page (and its words in the GIN index) until
  the space is reused; ``VACUUM`` marks it reusable but does not overwrite it. ``VACUUM FULL``
  (or ``pg_repack``) rewrites the tables and their indexes into new files, and the old files
  are removed at the next checkpoint: ``await store.vacuum()`` (:func:`vacuum`) runs it on the
  store's tables (an ``ACCESS EXCLUSIVE`` lock per table while it runs: schedule it).
- **WAL and its archives**: the inserted text is in the write-ahead log until its segments
  are recycled and overwritten, and in every WAL archive and base backup until they expire.
  Set archive and backup retention to your erasure deadline (``archive_cleanup_command``,
  your backup tool's retention), or make erasure independent of copies with the encrypting
  layer (``encrypt::postgresql://...``): ``delete_user`` shreds the user's data key and every
  copy of their ciphertext becomes unreadable.
- **replicas** apply the deletes through replication; their own dead tuples need the same
  ``VACUUM FULL``.
- **column statistics** (``pg_statistic``) can hold sample values of short texts from the
  last ``ANALYZE``: :func:`vacuum` (``await store.vacuum()``) re-analyzes the tables, so the live
  statistics hold no erased value (the old statistics rows are dead tuples of
  ``pg_statistic`` until a superuser's ``VACUUM FULL pg_statistic``).

Measured on PostgreSQL 15 (``tests/stores/postgres/test_erasure.py``): after ``delete_user``, a
plain ``VACUUM`` and a ``CHECKPOINT`` the erased text is still in the table's data file;
after ``VACUUM FULL`` and a ``CHECKPOINT`` it is in no file under ``base/``, only in
``pg_wal`` until the segment is recycled.
"""

from __future__ import annotations

from storage.stores.postgres.context import PostgresContext

__all__ = ["vacuum"]


async def vacuum(ctx: PostgresContext, *, full: bool) -> None:
    """``VACUUM`` (``FULL``: rewritten) every table of the store, then ``ANALYZE`` it."""
    pool = await ctx.pool()
    names = ctx.names
    tables = [names.messages] + [
        names.qualified(what)
        for what in (
            "keys",
            "sessions",
            "checkpoints",
            "versions_cp",
            "leases",
            "records",
            "rewinds",
            "rewound",
        )
    ]
    verb = "VACUUM (FULL, ANALYZE)" if full else "VACUUM (ANALYZE)"
    async with pool.acquire() as conn:
        for table in tables:
            await conn.execute(f"{verb} {table}")

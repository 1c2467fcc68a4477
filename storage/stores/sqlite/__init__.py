"""``sqlite:///PATH``: the embedded default store (stdlib ``sqlite3``, WAL mode).

Modules, one concept each: :mod:`~storage.stores.sqlite.store` (the class and its hooks),
:mod:`~storage.stores.sqlite.connection` (opening: file mode, pragmas, version check),
:mod:`~storage.stores.sqlite.schema` (tables, ``user_version``, migrations),
:mod:`~storage.stores.sqlite.reads` (fetch through the decode cache, tails, session rows),
:mod:`~storage.stores.sqlite.writes` (transactions, appends, removals, WAL truncation),
:mod:`~storage.stores.sqlite.rewrite` (replace, delete, delete a user),
:mod:`~storage.stores.sqlite.tallies` (per-key and per-session counts, epochs),
:mod:`~storage.stores.sqlite.checkpoints` (heads, checkpoints, leases),
:mod:`~storage.stores.sqlite.sessions` (session listing), :mod:`~storage.stores.sqlite.fts`
and :mod:`~storage.stores.sqlite.search` (the index and search),
:mod:`~storage.stores.sqlite.records` and :mod:`~storage.stores.sqlite.retention`.
"""

from __future__ import annotations

from storage.stores.sqlite.schema import MIGRATIONS, SCHEMA_VERSION
from storage.stores.sqlite.store import SQLiteChatStorage, Synchronous

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SQLiteChatStorage", "Synchronous"]

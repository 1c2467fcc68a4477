"""``sqlite:///PATH``: the embedded default store (stdlib ``sqlite3``, WAL mode).

Modules, one concept each: :mod:`~storage.stores.sqlite.store` (the store),
:mod:`~storage.stores.sqlite.schema` (tables, ``user_version``, migrations),
:mod:`~storage.stores.sqlite.writes` (transactions, appends, WAL truncation),
:mod:`~storage.stores.sqlite.tallies` (per-key and per-session counts),
:mod:`~storage.stores.sqlite.checkpoints` (heads, checkpoints, leases),
:mod:`~storage.stores.sqlite.sessions`, :mod:`~storage.stores.sqlite.fts` (search) and
:mod:`~storage.stores.sqlite.records`.
"""

from __future__ import annotations

from storage.stores.sqlite.schema import MIGRATIONS, SCHEMA_VERSION
from storage.stores.sqlite.store import SQLiteChatStorage, Synchronous

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SQLiteChatStorage", "Synchronous"]

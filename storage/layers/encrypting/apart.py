"""Keeping the keyring apart from the data: the checks run when the layer is built.

Crypto-shredding destroys nothing if the keyring lives where the data lives: every copy of
the data directory (or file, or server prefix) would hold every data key, and the two
stores' files could collide (a JSONL keyring inside a JSONL data directory is the data of a
user named after its directory). So a keyring is refused when its files and the data
store's files overlap (one is, or lies inside, the other), whatever either store's type,
and when both are the same server store (same Redis server, database and prefix; same
PostgreSQL server, database, schema and table).
"""

from __future__ import annotations

import os
from typing import Final
from urllib.parse import parse_qsl, urlsplit

from storage.errors import ConfigError
from storage.layers.encrypting.keyring import Keyring, SQLiteKeyring, StoreKeyring

__all__ = ["check_apart", "check_durable", "innermost"]

# SQLite keeps a database in its file and these siblings (a copy of them is a copy of it).
_SQLITE_SIDECARS: Final = ("", "-wal", "-shm", "-journal")
_LOOPBACK: Final = frozenset({"localhost", "127.0.0.1", "::1", ""})


def innermost(component: object) -> object:
    """The base store under a stack of wrappers (``.inner`` chains)."""
    seen: set[int] = set()
    while id(component) not in seen:
        seen.add(id(component))
        below = getattr(component, "inner", None)
        if below is None:
            return component
        component = below
    return component


def describe(component: object) -> str:
    own = getattr(component, "describe", None)
    return str(own()) if callable(own) else type(component).__name__


def _real(path: str) -> str:
    return os.path.realpath(os.path.abspath(os.path.expanduser(path)))


def _files(component: object) -> list[str]:
    """The real paths holding a file store's data: a JSONL root directory, or a SQLite file
    and its siblings; ``[]`` for a store without files."""
    root = getattr(component, "root", None)
    if isinstance(root, str):
        return [_real(root)]
    path = getattr(component, "path", None)
    if isinstance(path, str) and path and path != ":memory:":
        real = _real(path)
        return [real + suffix for suffix in _SQLITE_SIDECARS]
    return []


def _keyring_files(keyring: Keyring) -> list[str]:
    if isinstance(keyring, SQLiteKeyring):
        return _files(keyring)
    if isinstance(keyring, StoreKeyring):
        return _files(innermost(keyring.store))
    return []


def _relation(ring: str, data: str) -> str | None:
    """How the keyring path ``ring`` overlaps the data path ``data`` (``None``: apart)."""
    if ring == data:
        return "is the data store's own file or directory"
    if ring.startswith(data.rstrip(os.sep) + os.sep):
        return "lies inside the data store's directory"
    if data.startswith(ring.rstrip(os.sep) + os.sep):
        return "holds the data store's files"
    return None


def _server(component: object) -> tuple[object, ...] | None:
    """Where a server store keeps its data, normalised (``None``: not a server store)."""
    url = getattr(component, "url", None)
    prefix = getattr(component, "prefix", None)
    if isinstance(url, str) and url.startswith(("redis://", "rediss://")):
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        host = (parts.hostname or "").lower()
        db = (
            (parts.path.strip("/") or query.get("db") or "0")
            if not getattr(component, "cluster", False)
            else "0"
        )
        return (
            "redis",
            "localhost" if host in _LOOPBACK else host,
            parts.port or 6379,
            str(db),
            prefix,
        )
    dsn = getattr(component, "dsn", None)
    if isinstance(dsn, str) and dsn.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(dsn)
        query = dict(parse_qsl(parts.query))
        host = (parts.hostname or query.get("host") or "").lower()
        return (
            "postgres",
            "localhost" if host in _LOOPBACK else host,
            parts.port or int(query.get("port") or 5432),
            parts.path.strip("/") or query.get("dbname") or parts.username or "",
            getattr(component, "schema", None),
            getattr(component, "table", None),
        )
    return None


_KEEP_APART: Final = "copies of the data must not hold the keys"


def check_apart(keyring: Keyring, inner: object) -> None:
    """Refuse a keyring kept in (or holding) the data store.

    Raises:
        ConfigError: the keyring's file or directory is, lies inside, or contains the data
            store's file or directory; or both are one server store (same server, database
            and prefix, or schema and table); or both are the very same store object.
    """
    base = innermost(inner)
    for ring in _keyring_files(keyring):
        for data in _files(base):
            relation = _relation(ring, data)
            if relation is not None:
                raise ConfigError(
                    f"encrypt: the keyring {keyring.location} {relation} ({data}); keep the "
                    f"keyring in a file or directory of its own, outside the data "
                    f"({_KEEP_APART})"
                )
    if isinstance(keyring, StoreKeyring):
        ring_base = innermost(keyring.store)
        where = _server(base)
        if ring_base is base or (where is not None and _server(ring_base) == where):
            raise ConfigError(
                f"encrypt: the keyring {keyring.location} is the data store itself; give it "
                f"its own database, schema, table or prefix ({_KEEP_APART})"
            )


def check_durable(location: str, inner: object) -> None:
    """Refuse a ``memory://`` keyring (from configuration) over a store that persists.

    Raises:
        ConfigError: the keyring would lose every data key, and so every message, on exit.
    """
    if location.startswith("memory:") and not describe(innermost(inner)).startswith("memory"):
        raise ConfigError(
            "encrypt: a memory:// keyring loses every data key when the process ends, and "
            "with them every message of the persistent store below; give the keyring a "
            "file or a server of its own"
        )

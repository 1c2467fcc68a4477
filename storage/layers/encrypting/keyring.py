"""The keyring: each user's data key, wrapped by a master key, kept apart from the data.

Crypto-shredding rests on this store being separate: ``delete_user`` destroys the user's
entry here, and every copy of the user's ciphertext (WAL files, free pages, replicas, backups,
exports) becomes unreadable, because the data key existed nowhere else. Two kinds:

- :class:`SQLiteKeyring` (a path, or ``sqlite:///path``): one small file of its own,
  ``secure_delete`` on, the write-ahead log truncated after every change, so a destroyed or
  re-wrapped entry leaves no old copy in the file. The default, for one host.
- :class:`StoreKeyring` (any other store URL: ``redis://...``, ``postgresql://...``,
  ``jsonl://...``, even ``memory://``): one entry per user in a chatlayers store of its own,
  for fleets sharing a server.

Neither is ever created by a read or a save (:meth:`Keyring.create` does it, on request), and
both keep an identity, a generation and erasure records (:mod:`.keyring_base`).

Do not back the keyring up together with the data (a backup of both defeats shredding):
keep keyring backups separate and short-lived.
"""

from __future__ import annotations

import os

from storage.layers.encrypting.keyring_base import Keyring, KeyringState, WrappedKey
from storage.layers.encrypting.keyring_sqlite import SQLiteKeyring
from storage.layers.encrypting.keyring_store import StoreKeyring

__all__ = [
    "Keyring",
    "KeyringState",
    "SQLiteKeyring",
    "StoreKeyring",
    "WrappedKey",
    "open_keyring",
]


def open_keyring(location: str) -> Keyring:
    """The keyring at ``location``: a file path or ``sqlite:///path`` (a
    :class:`SQLiteKeyring`), or any other store URL (a :class:`StoreKeyring`).

    Raises:
        ConfigError: an empty location, or a store URL that cannot be built.
    """
    from storage.errors import ConfigError
    from storage.redact import redact_url

    if not isinstance(location, str) or not location.strip():
        raise ConfigError("encrypt: keyring must name a file or a store URL")
    if "://" not in location:
        return SQLiteKeyring(os.path.expanduser(location), location=location)
    if location.startswith("sqlite://"):
        from storage.stores.urls import path_from_url

        path = path_from_url(location, "sqlite", options={})
        if path == ":memory:":
            raise ConfigError(
                "encrypt: a keyring in sqlite://:memory: would lose every data key on exit"
            )
        return SQLiteKeyring(path, location=redact_url(location))
    from storage.config import open_storage

    stack = open_storage(location)
    return StoreKeyring(stack.inner, redact_url(location))

"""The ``encrypt`` layer: chat history encrypted at rest, erasure that reaches every copy.

``EncryptingChatStorage(inner, keyring=..., key_env=...)`` (``encrypt::`` in URLs) seals
every message, checkpoint message and record with AES-256-GCM under a per-user data key
before the inner store sees it, and opens them on every read. Data keys are kept only
wrapped by a master key, in a keyring apart from the data, so ``delete_user`` crypto-shreds:
destroying one small keyring entry makes the user's ciphertext unreadable in every copy
(WAL files, free pages, replicas, backups, exports).

Modules, one concept each:

- :mod:`.cipher`: the ciphertext token (AES-GCM, key id, associated data);
- :mod:`.master`: master keys from configuration, fingerprints, wrapping data keys;
- :mod:`.keyring`: where wrapped data keys live (a SQLite file, or any store URL), with
  :mod:`.keyring_base` (the protocol), :mod:`.keyring_sqlite` and :mod:`.keyring_store`;
- :mod:`.apart`: refusing a keyring that overlaps the data store;
- :mod:`.ledger`: the keyring's id and generation recorded in the data store;
- :mod:`.datakeys`: finding, making, checking and destroying data keys (never stranding
  data), with :mod:`.gate` (erasures and writes of a user serialized in a process);
- :mod:`.errors`: missing keyring, another or older keyring, missing data key;
- :mod:`.envelope`: what the store holds for a message, a checkpoint message, a record;
- :mod:`.cache`: decrypted messages kept in memory for fast re-reads;
- :mod:`.seam`: messages sealed on the way down and opened on the way up (the hooks of
  :class:`storage.layers.payload.PayloadLayer`, which writes every method that carries them);
- :mod:`.vault`: the optional placeholder vault (reversible PII placeholders), and
  :mod:`.records`: the layer's record hooks and ``reveal``;
- :mod:`.layer`: ``EncryptingChatStorage``.

A keyring is made on request only (``chatlayers keys init``, ``create_keyring=True``).
Rotation: give every worker the new master key first (``key_env`` holds ``NEW,OLD``), then
run ``chatlayers keys rotate`` (re-wraps every data key under the newest master key in short
batches, online and resumable; no message is rewritten), then drop the old key everywhere.
"""

from __future__ import annotations

from storage.layers.encrypting.envelope import KeyErasedError
from storage.layers.encrypting.errors import (
    DataKeyMissingError,
    KeyringMismatchError,
    KeyringMissingError,
)
from storage.layers.encrypting.keyring import (
    Keyring,
    KeyringState,
    SQLiteKeyring,
    StoreKeyring,
    WrappedKey,
    open_keyring,
)
from storage.layers.encrypting.layer import EncryptingChatStorage
from storage.layers.encrypting.master import (
    DEFAULT_KEY_ENV,
    MasterKeys,
    fingerprint,
    load_master_keys,
    new_master_key,
)
from storage.layers.encrypting.rotation import KeyStatus, key_status, rotate_keys
from storage.layers.encrypting.vault import PlaceholderVault

__all__ = [
    "DEFAULT_KEY_ENV",
    "DataKeyMissingError",
    "EncryptingChatStorage",
    "KeyErasedError",
    "KeyStatus",
    "Keyring",
    "KeyringMismatchError",
    "KeyringMissingError",
    "KeyringState",
    "MasterKeys",
    "PlaceholderVault",
    "SQLiteKeyring",
    "StoreKeyring",
    "WrappedKey",
    "fingerprint",
    "key_status",
    "load_master_keys",
    "new_master_key",
    "open_keyring",
    "rotate_keys",
]

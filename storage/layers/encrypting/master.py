"""Master keys: parsed from configuration, named by fingerprints, wrapping data keys.

A master key is 32 random bytes written as urlsafe base64 (``chatlayers keys new`` prints
one). Configuration gives one or more, newest first, comma-separated (``key_env`` names the
environment variable holding them): the newest wraps every new data key, all of them unwrap.
A master key is never stored and never printed; it is named by its *fingerprint*, 16 hex
digits of a SHA-256 over a fixed label and the key (one-way: it does not reveal the key).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Iterable, Sequence
from typing import Final

import attrs
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from storage.errors import ConfigError, CorruptRecordError

__all__ = [
    "DEFAULT_KEY_ENV",
    "MasterKey",
    "MasterKeys",
    "fingerprint",
    "load_master_keys",
    "new_master_key",
    "parse_master_keys",
]

#: The environment variable read when neither ``keys`` nor ``key_env`` is given.
DEFAULT_KEY_ENV: Final = "CHATLAYERS_MASTER_KEYS"
_KEY_BYTES: Final = 32
_NONCE: Final = 12
_FP_LABEL: Final = b"chatlayers master key fingerprint\x00"
_WRAP_LABEL: Final = b"chatlayers data key v1\x00"


def new_master_key() -> str:
    """A new master key: 32 bytes from the OS's CSPRNG as urlsafe base64 (44 characters)."""
    return base64.urlsafe_b64encode(os.urandom(_KEY_BYTES)).decode("ascii")


def fingerprint(key: bytes) -> str:
    """16 hex digits naming ``key`` (one-way; safe to print and to store)."""
    return hashlib.sha256(_FP_LABEL + key).hexdigest()[:16]


def _wrap_aad(user_id: str, key_id: str) -> bytes:
    # A ChatKey part never holds NUL, and a key id is hex: the join is unambiguous.
    return _WRAP_LABEL + f"{user_id}\x00{key_id}".encode()


@attrs.frozen(repr=False)
class MasterKey:
    """One master key and its fingerprint (the repr shows only the fingerprint)."""

    secret: bytes
    fingerprint: str

    def __repr__(self) -> str:
        return f"MasterKey(fingerprint={self.fingerprint!r})"

    def wrap(self, user_id: str, key_id: str, data_key: bytes) -> bytes:
        """``nonce + AES-GCM(data_key)``, bound to the user and the data key's id."""
        nonce = os.urandom(_NONCE)
        return nonce + AESGCM(self.secret).encrypt(nonce, data_key, _wrap_aad(user_id, key_id))

    def unwrap(self, user_id: str, key_id: str, wrapped: bytes) -> bytes:
        """The data key of a :meth:`wrap` result.

        Raises:
            CorruptRecordError: the wrapped key fails authentication (altered, or moved to
                another user's entry).
        """
        try:
            return AESGCM(self.secret).decrypt(
                wrapped[:_NONCE], wrapped[_NONCE:], _wrap_aad(user_id, key_id)
            )
        except (InvalidTag, ValueError):
            raise CorruptRecordError(
                f"the keyring entry of user {user_id!r} (data key {key_id}) does not "
                f"authenticate under master key {self.fingerprint}: it was altered or moved"
            ) from None


@attrs.frozen
class MasterKeys:
    """The configured master keys, newest first (never empty).

    Attributes:
        keys: the keys, ``keys[0]`` the newest (it wraps new data keys and rotations).
        source: where they came from, for messages (``"$CHATLAYERS_MASTER_KEYS"``,
            ``"keys option"``); never the keys themselves.
    """

    keys: tuple[MasterKey, ...]
    source: str

    @property
    def newest(self) -> MasterKey:
        return self.keys[0]

    def find(self, fp: str) -> MasterKey | None:
        """The configured key with fingerprint ``fp``, or ``None``."""
        for key in self.keys:
            if key.fingerprint == fp:
                return key
        return None

    def fingerprints(self) -> list[str]:
        return [key.fingerprint for key in self.keys]


def _decode_key(text: str, position: int, source: str) -> bytes:
    text = text.strip()
    padded = text + "=" * (-len(text) % 4)
    try:
        raw = base64.urlsafe_b64decode(padded.encode("ascii"))
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raw = b""
    if len(raw) != _KEY_BYTES:
        # Never quote the value: a mistyped key is still mostly a key.
        raise ConfigError(
            f"encrypt: master key {position} of {source} is not 32 bytes of urlsafe base64 "
            "(make one with `chatlayers keys new`)"
        )
    return raw


def parse_master_keys(value: str | Iterable[str], source: str) -> MasterKeys:
    """Master keys from ``"k1,k2"`` (newest first) or a sequence of keys.

    Raises:
        ConfigError: no key, a key that is not 32 bytes of urlsafe base64 (named by its
            position, never quoted), or the same key twice.
    """
    texts: Sequence[str] = (
        [t for t in value.split(",") if t.strip()] if isinstance(value, str) else list(value)
    )
    if not texts:
        raise ConfigError(f"encrypt: {source} holds no master key")
    keys: list[MasterKey] = []
    for position, text in enumerate(texts, 1):
        if not isinstance(text, str):
            raise ConfigError(f"encrypt: master key {position} of {source} must be a string")
        raw = _decode_key(text, position, source)
        fp = fingerprint(raw)
        if any(k.fingerprint == fp for k in keys):
            raise ConfigError(f"encrypt: master key {position} of {source} is given twice")
        keys.append(MasterKey(raw, fp))
    return MasterKeys(tuple(keys), source)


def load_master_keys(keys: str | Sequence[str] | None, key_env: str | None) -> MasterKeys:
    """The master keys of the layer's options: ``keys`` when given, else the variable
    ``key_env`` (default :data:`DEFAULT_KEY_ENV`).

    Raises:
        ConfigError: both given, the variable unset or empty, or a malformed key.
    """
    if keys is not None:
        if key_env is not None:
            raise ConfigError("encrypt: give keys or key_env, not both")
        return parse_master_keys(keys, "the keys option")
    variable = key_env or DEFAULT_KEY_ENV
    value = os.environ.get(variable)
    if value is None:
        raise ConfigError(
            f"encrypt: the environment variable {variable} (key_env) is not set; set it to "
            "one or more master keys, newest first, comma-separated (make one with "
            "`chatlayers keys new`)"
        )
    if not value.strip():
        raise ConfigError(
            f"encrypt: the environment variable {variable} (key_env) is empty; "
            "set it to one or more keys, newest first, comma-separated "
            "(make one with `chatlayers keys new`)"
        )
    return parse_master_keys(value, f"${variable}")

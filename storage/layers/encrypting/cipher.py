"""The ciphertext token: AES-256-GCM over one value, bound to its place by associated data.

A token is ASCII text that any store keeps as a string::

    ce1:<key id, 16 hex>:<base64 of nonce (12 bytes) + ciphertext + tag (16 bytes)>

The key id names the data key that sealed it (so a reader can tell "this user's key was
erased" from "this row was tampered with"); the associated data (built by the caller from the
conversation key, the message or record id and a domain) is authenticated but not stored, so
a token copied to another user, conversation, message or kind of value fails to open.
"""

from __future__ import annotations

import binascii
import os
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from storage.errors import CorruptRecordError

__all__ = ["KEY_ID_CHARS", "PREFIX", "is_token", "open_token", "seal", "token_key_id"]

PREFIX: Final = "ce1:"
KEY_ID_CHARS: Final = 16
_NONCE: Final = 12
_ID_START: Final = len(PREFIX)
_ID_END: Final = _ID_START + KEY_ID_CHARS
_BODY: Final = _ID_END + 1
_b64encode = binascii.b2a_base64
_b64decode = binascii.a2b_base64


def seal(aead: AESGCM, key_id: str, aad: bytes, plaintext: bytes) -> str:
    """The token of ``plaintext`` sealed with ``aead`` (the data key named ``key_id``).

    A fresh random 96-bit nonce per token: with at most a few billion tokens per data key
    (one user's history), the chance of a nonce repeating stays negligible.
    """
    nonce = os.urandom(_NONCE)
    body = _b64encode(nonce + aead.encrypt(nonce, plaintext, aad), newline=False)
    return f"{PREFIX}{key_id}:{body.decode('ascii')}"


def is_token(value: object) -> bool:
    """Whether ``value`` looks like a token (a str with the prefix and a key id)."""
    return (
        isinstance(value, str)
        and value.startswith(PREFIX)
        and len(value) > _BODY
        and value[_ID_END] == ":"
    )


def token_key_id(token: str) -> str:
    """The key id a token names (the token's shape is not checked here)."""
    return token[_ID_START:_ID_END]


def open_token(aead: AESGCM, token: str, aad: bytes, where: str) -> bytes:
    """The plaintext of ``token``.

    Raises:
        CorruptRecordError: the token is malformed, or fails authentication (tampered with,
            or copied from another place: the associated data differs). ``where`` names it.
    """
    try:
        raw = _b64decode(token[_BODY:])
        if len(raw) < _NONCE + 16:
            raise ValueError("too short")
        return aead.decrypt(raw[:_NONCE], raw[_NONCE:], aad)
    except InvalidTag:
        raise CorruptRecordError(
            f"{where}: the ciphertext does not authenticate: it was altered, or copied from "
            "another user, conversation or message"
        ) from None
    except (ValueError, binascii.Error) as exc:
        raise CorruptRecordError(f"{where}: malformed ciphertext ({exc})") from None

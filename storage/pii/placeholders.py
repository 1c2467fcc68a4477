"""Placeholders: ``<EMAIL_ADDRESS_3f9a2c1d>``, a keyed hash of (secret, conversation, value).

The 8 hex digits are the first 32 bits of HMAC-SHA256 keyed with the scrubber's secret over
the conversation key and the normalized value, so one value gets one placeholder within a
conversation, the same value in two conversations cannot be linked, and nothing is stored.
A placeholder never matches a detector again (the scrubber skips anything shaped like
:data:`PLACEHOLDER_RE`), which makes scrubbing idempotent.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

from storage.message import ChatKey

__all__ = [
    "ENTITY_NAME_RE",
    "MASKED_ENTITIES",
    "PLACEHOLDER_RE",
    "KeyedHasher",
    "mask",
    "normalize",
]

#: What an entity name may look like (Presidio's style), so placeholders stay recognizable.
ENTITY_NAME_RE: Final = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
#: Any placeholder this module can produce.
PLACEHOLDER_RE: Final = re.compile(r"<[A-Z][A-Z0-9_]{0,63}_[0-9a-f]{8}>")
#: Entities that ``mask`` mode shows as ``****1234``; every other entity gets a placeholder.
MASKED_ENTITIES: Final = frozenset({"CREDIT_CARD", "PHONE_NUMBER"})

_DIGITS_ONLY: Final = frozenset({"CREDIT_CARD", "PHONE_NUMBER", "US_SSN"})
_BLOCK: Final = 64  # SHA-256's block size, in bytes
_IPAD: Final = bytes(b ^ 0x36 for b in range(256))  # RFC 2104's inner and outer pads
_OPAD: Final = bytes(b ^ 0x5C for b in range(256))
_NOT_DIGIT: Final = re.compile(r"\D+")
_NOT_ALNUM: Final = re.compile(r"[^0-9A-Za-z]+")


def normalize(entity: str, value: str) -> str:
    """The form of ``value`` that is hashed: spellings of one value share a placeholder.

    Card, phone and SSN numbers keep their digits only, IBANs their letters and digits
    (upper case), everything else is case-folded with runs of whitespace collapsed.
    """
    if entity in _DIGITS_ONLY:
        return _NOT_DIGIT.sub("", value)
    if entity == "IBAN_CODE":
        return _NOT_ALNUM.sub("", value).upper()
    return " ".join(value.split()).casefold()


def mask(value: str) -> str:
    """Replace every digit but the last four with ``*``, keeping separators: ``**** 1234``."""
    total = sum(ch.isdigit() for ch in value)
    keep_from = total - 4
    out: list[str] = []
    seen = 0
    for ch in value:
        if ch.isdigit():
            out.append(ch if seen >= keep_from else "*")
            seen += 1
        else:
            out.append(ch)
    return "".join(out)


class KeyedHasher:
    """Placeholders for one conversation: HMAC-SHA256(secret, key parts + value).

    The key parts are joined with NUL, which a ``ChatKey`` can never contain, so two
    different keys can never produce the same hashed input. HMAC is computed as RFC 2104
    defines it, from the two SHA-256 states of the padded secret (the inner one has taken
    the key parts): a placeholder then costs two hash copies, about half of copying an
    ``hmac`` object; the result is the same as :func:`hmac.new`'s (tested).
    """

    __slots__ = ("_inner", "_outer")

    def __init__(self, secret: bytes, key: ChatKey) -> None:
        prefix = "\x00".join((key.user_id, key.session_id, key.agent_id, ""))
        if len(secret) > _BLOCK:
            secret = hashlib.sha256(secret).digest()
        secret = secret.ljust(_BLOCK, b"\x00")
        self._inner = hashlib.sha256(secret.translate(_IPAD))
        self._inner.update(prefix.encode("utf-8", "surrogatepass"))
        self._outer = hashlib.sha256(secret.translate(_OPAD))

    def placeholder(self, entity: str, value: str) -> str:
        """``<ENTITY_xxxxxxxx>`` for ``value`` (normalized first, see :func:`normalize`)."""
        inner = self._inner.copy()
        inner.update(normalize(entity, value).encode("utf-8", "surrogatepass"))
        outer = self._outer.copy()
        outer.update(inner.digest())
        return f"<{entity}_{outer.hexdigest()[:8]}>"

"""Keyed hashes of conversation ids for telemetry: correlate spans, never reveal an id.

A user, session or agent id in a span or metric would put personal data into a monitoring
system that keeps it for months and shows it to every operator. Telemetry carries
``HMAC-SHA256(secret, part)`` instead, truncated to 16 hex characters (64 bits: enough to
tell apart the ids one deployment sees, not to invert): the same id gets the same hash in
every process that shares the secret, and nobody without the secret can test a guess.

The secret comes from the ``otel`` layer's ``secret`` (``secret_env`` in config), else
``CHATLAYERS_TELEMETRY_SECRET``; without one, a random per-process secret is used (hashes
then differ between processes and restarts) and a warning says so, as for the PII secret.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import warnings
from typing import Final

from storage.errors import ConfigError
from storage.message import ChatKey

__all__ = ["SECRET_ENV", "KeyHasher"]

SECRET_ENV: Final = "CHATLAYERS_TELEMETRY_SECRET"
"""The environment variable holding the telemetry hash secret."""

_PROCESS_SECRET: Final = secrets.token_bytes(32)
_RANDOM: Final = "random per-process"
_MAX_CACHED: Final = 4096


class KeyHasher:
    """Keyed hashes of the parts of a ``ChatKey``.

    Args:
        secret: the HMAC key; ``None``: ``CHATLAYERS_TELEMETRY_SECRET``, else a random
            per-process secret (with a ``RuntimeWarning``).
        source: where ``secret`` came from, for ``describe()`` (``env:VARIABLE``,
            ``config``); default ``"argument"``.

    Attributes:
        source: where the secret came from (never the secret).

    Raises:
        ConfigError: an empty secret.
    """

    def __init__(self, secret: str | bytes | None = None, *, source: str | None = None) -> None:
        if secret is not None:
            raw = secret.encode("utf-8") if isinstance(secret, str) else secret
            if not raw:
                raise ConfigError("the telemetry secret must be a non-empty str or bytes")
            self.source = source or "argument"
        elif os.environ.get(SECRET_ENV):
            raw = os.environ[SECRET_ENV].encode("utf-8")
            self.source = f"env:{SECRET_ENV}"
        else:
            raw = _PROCESS_SECRET
            self.source = _RANDOM
            warnings.warn(
                f"otel: no secret given and {SECRET_ENV} is not set; ids are hashed with a "
                "random per-process secret, so their hashes differ between processes and "
                "restarts",
                RuntimeWarning,
                stacklevel=3,
            )
        self._secret = raw
        self._keys: dict[ChatKey, tuple[str, str, str]] = {}
        self._users: dict[str, str] = {}

    def _hash(self, domain: bytes, *parts: str) -> str:
        message = domain + b"".join(b"\x00" + p.encode("utf-8", "surrogatepass") for p in parts)
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()[:16]

    def user(self, user_id: str) -> str:
        """The hash of a user id."""
        found = self._users.get(user_id)
        if found is None:
            if len(self._users) >= _MAX_CACHED:
                self._users.clear()
            found = self._users[user_id] = self._hash(b"user", user_id)
        return found

    def key(self, key: ChatKey) -> tuple[str, str, str]:
        """``(user, session, agent)`` hashes; the session's is of (user, session), so one
        session id of two users are two sessions."""
        found = self._keys.get(key)
        if found is None:
            if len(self._keys) >= _MAX_CACHED:
                self._keys.clear()
            found = self._keys[key] = (
                self.user(key.user_id),
                self._hash(b"session", key.user_id, key.session_id),
                self._hash(b"agent", key.agent_id),
            )
        return found

"""The scrubber's HMAC secret: given, from ``$CHATLAYERS_PII_SECRET``, or random per process."""

from __future__ import annotations

import os
import warnings
from typing import Final

from storage.errors import ConfigError

__all__ = ["RANDOM_SECRET", "SECRET_ENV", "load_secret", "warn_random_secret"]

SECRET_ENV: Final = "CHATLAYERS_PII_SECRET"
#: How ``describe()`` names a secret made for this process only.
RANDOM_SECRET: Final = "random per-process"
_PROCESS_SECRET: Final = os.urandom(32)


def load_secret(secret: str | bytes | None, source: str | None) -> tuple[bytes, str]:
    """The secret and where it came from, as ``describe()`` shows it: ``env:VARIABLE``,
    ``config``, ``argument`` (given in code) or ``random per-process``.

    Raises:
        ConfigError: ``secret`` is empty or neither str nor bytes.
    """
    if secret is not None:
        if isinstance(secret, str):
            secret = secret.encode("utf-8")
        if not isinstance(secret, bytes) or not secret:
            raise ConfigError("the PII secret must be a non-empty str or bytes")
        return secret, source or "argument"
    env = os.environ.get(SECRET_ENV)
    if env:
        return env.encode("utf-8"), f"env:{SECRET_ENV}"
    return _PROCESS_SECRET, RANDOM_SECRET


def warn_random_secret() -> None:
    """Say that placeholders made with a random secret change at every restart."""
    warnings.warn(
        f"PIIScrubber: no secret given and {SECRET_ENV} is not set; using a random "
        "per-process secret, so placeholders will not be stable across restarts",
        RuntimeWarning,
        stacklevel=4,
    )

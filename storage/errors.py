"""The one exception tree of chatlayers.

```
ChatStorageError
├── InvalidMessageError      a message (or loaded history) breaks a rule; nothing was stored
├── InvalidKeyError          a ChatKey part is empty, not a string, or holds NUL
├── InvalidArgumentError     another argument is wrong: a negative limit, a malformed cursor
├── ConflictError            a conditional write lost: someone wrote since (nothing stored)
├── StorageUnavailableError  the store's server or file cannot be reached (password redacted)
│   └── SchemaVersionError   the database was written by a newer chatlayers (never written)
├── CorruptRecordError       a stored record cannot be decoded
├── SummarizerError          a summarizer raised, timed out or returned a bad history
└── ConfigError              a stack cannot be built from the given URL, dict or TOML
```

Driver exceptions are translated at the store boundary with ``raise ... from exc``, so the
original is always available as ``__cause__``.
"""

from __future__ import annotations

__all__ = [
    "ChatStorageError",
    "ConfigError",
    "ConflictError",
    "CorruptRecordError",
    "InvalidArgumentError",
    "InvalidKeyError",
    "InvalidMessageError",
    "SchemaVersionError",
    "StorageUnavailableError",
    "SummarizerError",
]


class ChatStorageError(Exception):
    """Base class of every error chatlayers raises."""


class InvalidMessageError(ChatStorageError, ValueError):
    """A message or history breaks a rule (role, field type, tool pairing, ...).

    Raised before anything is written: the store is unchanged afterwards.
    """


class InvalidKeyError(ChatStorageError, ValueError):
    """A ``ChatKey`` part (user_id, session_id, agent_id) is not a non-empty string without NUL."""


class InvalidArgumentError(ChatStorageError, ValueError):
    """An argument other than a key or a message is invalid (``limit``, a cursor, a query)."""


class ConflictError(ChatStorageError):
    """A conditional write found the record changed since the caller read its version.

    Nothing was stored; read the key again and retry.
    """


class StorageUnavailableError(ChatStorageError):
    """The backing server or file cannot be reached; the URL's password is redacted."""


class SchemaVersionError(StorageUnavailableError):
    """The database's schema version is newer than this release knows; it is never written."""


class CorruptRecordError(ChatStorageError):
    """A stored record could not be decoded."""


class SummarizerError(ChatStorageError):
    """A summarizer failed or returned a history that breaks the summary rules.

    The original exception, if any, is the ``__cause__``. No raw message is lost.
    """


class ConfigError(ChatStorageError, ValueError):
    """A stack cannot be built: unknown name, bad option, missing optional driver."""

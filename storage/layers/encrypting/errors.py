"""The encrypting layer's own errors, beside :class:`~.envelope.KeyErasedError`.

```
StorageUnavailableError
├── KeyringMissingError    no keyring where the configuration says (never created, or the
│                          volume or server holding it is not there): nothing is created
├── KeyringMismatchError   the keyring is older than the data (restored from a backup) or
│                          another keyring than the one the data was written with
└── DataKeyMissingError    a value is sealed with a data key the keyring does not hold and
                           no erasure record names (lost, not erased)
CorruptRecordError
└── KeyErasedError         sealed with a data key an erasure destroyed: gone for good
```

The first three are outages of the keyring, not of the data: put the right keyring back and
everything reads again. Only an erasure record makes a ``KeyErasedError``.
"""

from __future__ import annotations

from typing import Final

from storage.errors import StorageUnavailableError

__all__ = [
    "CREATE_HINT",
    "DataKeyMissingError",
    "KeyringMismatchError",
    "KeyringMissingError",
]

#: How to make a keyring on purpose, for the messages that refuse to make one.
CREATE_HINT: Final = (
    "A keyring is only created when asked, so that a missing one never silently starts an "
    "empty one: for a new deployment run `chatlayers keys init --url '<stack URL>'` once, "
    "or pass create_keyring=True (URL: encrypt?create_keyring=true&keyring=...)"
)


class KeyringMissingError(StorageUnavailableError):
    """There is no keyring at the configured location; none was created."""


class KeyringMismatchError(StorageUnavailableError):
    """The keyring is not the one the data store was last written with: an older copy
    (restored from a backup) or another keyring. Nothing is read or written through it."""


class DataKeyMissingError(StorageUnavailableError):
    """A value is sealed with a data key the keyring does not hold, and no erasure record
    says it was destroyed: the keyring in use lacks it (an older or another keyring). Saves
    for that user are refused until it is back, so nothing new is sealed beside it."""

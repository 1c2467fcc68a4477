"""Record epochs: the name of one incarnation of a key's record (``Head.epoch``).

A store starts a new epoch whenever messages leave a key's record (``replace``, a retention
purge, a rebuilt head), so a cache or checkpoint made under another epoch is stale whatever
the sequence numbers say. Epochs are opaque: equal or not, never ordered. PostgreSQL draws
them on the server (``gen_random_uuid()``); the other stores here.
"""

from __future__ import annotations

import secrets

__all__ = ["new_epoch"]


def new_epoch() -> str:
    """A fresh random epoch: 128 bits as 32 hex digits."""
    return secrets.token_hex(16)

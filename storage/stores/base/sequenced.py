"""The ``SequencedStorage`` templates: ``head`` and ``fetch_since``.

The hot read path of every coherent cache (one ``head`` per fetch), so the checks are
inline and a hook that returns its result directly costs no coroutine frame.
"""

from __future__ import annotations

from typing import Final

from storage.abilities import Head, Tail
from storage.message import ChatKey
from storage.stores.base.core import MaybeAwaitable, StoreCore, check_key
from storage.stores.checks import check_after

__all__ = ["EMPTY_HEAD", "SequencedTemplate"]

#: The head of a key holding no message.
EMPTY_HEAD: Final = Head(0, "", 0)


class SequencedTemplate(StoreCore):
    """``head`` and ``fetch_since`` over the ``_head`` and ``_fetch_since`` hooks."""

    def _head(self, key: ChatKey) -> MaybeAwaitable[Head]:
        """The key's head (``EMPTY_HEAD`` when it holds no message): one cheap read."""
        raise NotImplementedError

    def _fetch_since(self, key: ChatKey, after: int) -> MaybeAwaitable[Tail]:
        """Raw messages with ``seq > after`` (an int >= 0) and the head, in one snapshot."""
        raise NotImplementedError

    async def head(self, key: ChatKey) -> Head:
        """The key's head: the newest sequence number, the record's epoch and the
        checkpoint's version; ``Head(0, "", 0)`` when the key holds no message. One cheap
        read (one round trip on a server); a head or tally found missing or unreadable is
        rebuilt from the raw record first (a new epoch).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` (or a part the store cannot hold).
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
        """
        if type(key) is not ChatKey:
            check_key(key)
        if self._closed:
            raise self._closed_error()
        try:
            found = self._head(key)
            return found if isinstance(found, Head) else await found
        except self.driver_errors as exc:
            raise self._unavailable(exc) from exc

    async def fetch_since(self, key: ChatKey, after: int) -> Tail:
        """Raw messages with ``seq > after`` (``after=0``: all) and the head, read in one
        snapshot: a reader tailing a key by sequence never misses a message committed later.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` (or a part the store cannot hold).
            InvalidArgumentError: ``after`` is not an int >= 0.
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
            CorruptRecordError: a stored message cannot be decoded.
        """
        if type(key) is not ChatKey:
            check_key(key)
        if type(after) is not int or after < 0:
            check_after(after)
        if self._closed:
            raise self._closed_error()
        try:
            found = self._fetch_since(key, after)
            return found if isinstance(found, Tail) else await found
        except self.driver_errors as exc:
            raise self._unavailable(exc) from exc

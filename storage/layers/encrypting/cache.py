"""Decrypted messages kept in memory, so a re-read costs a lookup instead of AES-GCM + JSON.

Two levels, both only ever returning a message for the key, message id and data key it was
decrypted under:

- by token: the token (random nonce: unique per stored message) → the message; bounded by
  the tokens' total length, first in first out;
- by conversation: the last list of stored skeletons read for a key and its decryption. A
  store that caches decoded rows (SQLite, PostgreSQL) returns the *same* skeleton objects
  again, so a re-read of a whole history is one identity comparison of two lists (done in
  C) plus decrypting only the messages appended since.

The plaintext lives only in this process's memory, like a summarizing buffer; ``delete`` and
``delete_user`` drop what they erase, and a data key the keyring no longer holds (another
process erased the user) never serves a cached message again.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from storage.errors import ConfigError
from storage.message import ChatKey, ChatMessage

__all__ = ["PlainCache", "check_cache_chars"]


def check_cache_chars(value: object) -> None:
    """Refuse a ``cache_chars`` that is not an int >= 0 (a bool included).

    Raises:
        ConfigError: it is not.
    """
    if type(value) is not int or value < 0:
        raise ConfigError(f"encrypt: cache_chars must be an int >= 0, got {value!r}")


_MAX_VIEWS: Final = 512

# token -> (conversation, data key id, message)
_Entry = tuple[ChatKey, str, ChatMessage]
# conversation -> (data key id, skeletons, messages)
_View = tuple[str, list[ChatMessage], list[ChatMessage]]


class PlainCache:
    """Decrypted messages by token and the last read of each conversation.

    Args:
        max_chars: budget in characters of token text; 0 disables both levels.
    """

    __slots__ = ("_chars", "entries", "max_chars", "views")

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.entries: OrderedDict[str, _Entry] = OrderedDict()
        self.views: OrderedDict[ChatKey, _View] = OrderedDict()
        self._chars = 0

    def add(self, token: str, key: ChatKey, key_id: str, message: ChatMessage) -> None:
        """Remember ``message`` as the decryption of ``token`` in ``key``."""
        if not self.max_chars or token in self.entries:
            return
        self.entries[token] = (key, key_id, message)
        self._chars += len(token)
        while self._chars > self.max_chars and self.entries:
            old, _ = self.entries.popitem(last=False)
            self._chars -= len(old)

    def remember_view(
        self, key: ChatKey, key_id: str, stored: list[ChatMessage], plain: list[ChatMessage]
    ) -> None:
        """Remember the last read of ``key``: the skeletons the store returned and their
        decryption (the caller keeps neither list)."""
        if not self.max_chars:
            return
        views = self.views
        views[key] = (key_id, stored, plain)
        views.move_to_end(key)
        if len(views) > _MAX_VIEWS:
            views.popitem(last=False)

    def discard(self, user_id: str, key: ChatKey | None = None) -> None:
        """Forget everything of ``key`` (or of the whole user when ``key`` is ``None``)."""
        if key is None:
            doomed = [t for t, (k, _, _) in self.entries.items() if k.user_id == user_id]
            views = [k for k in self.views if k.user_id == user_id]
        else:
            doomed = [t for t, (k, _, _) in self.entries.items() if k == key]
            views = [key] if key in self.views else []
        for token in doomed:
            del self.entries[token]
            self._chars -= len(token)
        for view in views:
            del self.views[view]

    def clear(self) -> None:
        self.entries.clear()
        self.views.clear()
        self._chars = 0

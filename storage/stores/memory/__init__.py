"""``memory://``: conversations in process memory (tests, caches, short-lived workers).

The reference implementation of every ability (``storage.abilities``): the other stores are
compared to it by the conformance kit (:mod:`storage.testing`). Modules: :mod:`.store` (the
class and its hooks), :mod:`.conversation` (one key's record), :mod:`.sessions` (session
listing) and :mod:`.retention` (purges).
"""

from __future__ import annotations

from storage.stores.memory.store import InMemoryChatStorage

__all__ = ["InMemoryChatStorage"]

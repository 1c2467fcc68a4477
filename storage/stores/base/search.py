"""The ``SearchableStorage`` template."""

from __future__ import annotations

from storage.abilities import SearchHit
from storage.message import check_key_part
from storage.search import check_search_args
from storage.stores.base.core import MaybeAwaitable, StoreCore

__all__ = ["SearchTemplate"]


class SearchTemplate(StoreCore):
    """``search`` over the ``_search`` hook."""

    def _search(
        self, user_id: str, query: str, terms: list[str], limit: int
    ) -> MaybeAwaitable[list[SearchHit]]:
        """The user's best ``limit`` hits for ``query`` (``terms``: its normalized words,
        at least one)."""
        raise NotImplementedError

    async def search(self, user_id: str, query: str, *, limit: int = 20) -> list[SearchHit]:
        """Messages of ``user_id`` holding any word of ``query``, best first (ties: the
        newer message); never another user's. Words match case- and accent-insensitively
        (:mod:`storage.search`); the snippet is :func:`storage.search.make_snippet`'s.

        Raises:
            InvalidKeyError: ``user_id`` is not a valid key part.
            InvalidArgumentError: a query without words, or ``limit`` < 1.
            StorageUnavailableError: the backend cannot be reached, or the store is closed.
            CorruptRecordError: a stored message cannot be decoded.
        """
        check_key_part("user_id", user_id)
        terms = check_search_args(query, limit)
        self._check_open()
        return await self._call(self._search, user_id, query, terms, limit)

"""What changes the record other than an append, and time travel (a mixin of the layer):
``replace``, ``fork`` and ``rewind`` go to the stack below and drop what the layer cached;
the record as it stood is read below; provenance is rebuilt by the views
(:mod:`.provenance`)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, cast

from storage.abilities import TimeTravelStorage, ViewProvenance, forward
from storage.message import ChatKey, ChatMessage

if TYPE_CHECKING:
    from storage.layers.summarizing.views import Views
    from storage.protocol import ChatStorage

__all__ = ["RecordEdits"]


class RecordEdits:
    """``replace``, ``fork``, ``rewind``, ``fetch_as_of``, ``fetch_timeline`` and
    ``provenance`` of :class:`~storage.layers.summarizing.SummarizingChatStorage`."""

    inner: ChatStorage
    _views: Views

    # The record as it stood is the record's (raw): read from the stack below.
    fetch_as_of = forward(TimeTravelStorage.fetch_as_of)
    fetch_timeline = forward(TimeTravelStorage.fetch_timeline)

    async def replace(
        self,
        key: ChatKey,
        messages: Sequence[ChatMessage],
        *,
        expected_version: str | None = None,
    ) -> list[ChatMessage]:
        """Atomically replace the key's raw record (the store drops its checkpoint); the
        cached view is dropped, so the next fetch is built from the new record.
        ``expected_version`` is passed to the stack below (its ``replace`` decides).

        Raises:
            InvalidMessageError: ``messages`` is not a valid history (nothing changed).
        """
        views = self._views
        views.forget(key)
        inner: Any = self.inner
        try:
            result: list[ChatMessage] = await inner.replace(
                key, messages, expected_version=expected_version
            )
        finally:
            views.forget(key)
        return result

    async def fork(self, key: ChatKey, new_key: ChatKey, *, at: str | None = None) -> int:
        """Fork in the stack below (:meth:`storage.abilities.TimeTravelStorage.fork`): the
        store carries over a checkpoint that covers the copied messages, so in store mode
        the fork is served the same view with no summarizer call; in memory mode its first
        view over the budget is summarized again. A view of ``new_key`` cached here is
        dropped.

        Raises:
            InvalidArgumentError: ``new_key`` is ``key`` or of another user; ``at`` is not a
                message of ``key``.
            ConflictError: ``new_key`` holds messages (nothing copied).
        """
        views = self._views
        views.forget(new_key)
        try:
            copied: int = await self._timetravel.fork(key, new_key, at=at)
        finally:
            views.forget(new_key)
        return copied

    async def rewind(self, key: ChatKey, to: str) -> int:
        """Rewind in the stack below (:meth:`storage.abilities.TimeTravelStorage.rewind`)
        and drop the key's cached view: the next fetch is built from the rewound record (the
        store keeps a checkpoint that covers only kept messages, so no summarizer call is
        needed then). Other workers see the new epoch on their next fetch.

        Raises:
            InvalidArgumentError: ``to`` is not a message of the key's view.
        """
        views = self._views
        views.forget(key)
        try:
            hidden: int = await self._timetravel.rewind(key, to)
        finally:
            views.forget(key)
        return hidden

    async def provenance(self, key: ChatKey, message_id: str) -> ViewProvenance | None:
        """What the model was given for the reply ``message_id``: the view the last fetch of
        ``key`` through this instance served before the reply was saved through it, rebuilt
        from the record it kept (:mod:`.provenance`). ``None`` when that cannot be known
        (see :meth:`storage.abilities.TimeTravelStorage.provenance`).

        Raises:
            InvalidArgumentError: ``message_id`` is not a non-empty str.
        """
        return await self._views.provenance(key, message_id)

    def reading_provenance(self) -> AbstractContextManager[None]:
        """A block in which :meth:`provenance` reads a key once for all its replies (its
        records, its timeline, each checkpoint version; dropped when the block ends), not
        once per reply: for a caller that rebuilds many replies and writes nothing meanwhile
        (``verify --views``)."""
        return self._views.recorder.reading()

    @property
    def _timetravel(self) -> TimeTravelStorage:
        return cast(TimeTravelStorage, self.inner)

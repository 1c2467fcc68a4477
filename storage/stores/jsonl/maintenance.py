"""The JSONL store's maintenance (a mixin of :class:`~storage.stores.jsonl.JsonlChatStorage`):
rewriting files without their torn, unreadable or incomplete lines."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio

from storage.message import ChatKey
from storage.stores.base import check_key
from storage.stores.jsonl.compact import CompactResult, compact_files
from storage.stores.jsonl.names import Paths, session_paths
from storage.stores.jsonl.tree import all_sessions

if TYPE_CHECKING:
    from storage.stores.jsonl.writer import Writer

__all__ = ["Maintenance"]


class Maintenance:
    """``compact`` and ``compact_all``."""

    root: str
    _writer: Writer

    if TYPE_CHECKING:  # the store's own (declared here for the type checker only)

        def _check_open(self) -> None: ...
        def _paths(self, key: ChatKey) -> Paths: ...
        def _forget(self, prefix: str, *, lines: bool = False) -> None: ...
        async def _locked(self, paths: Paths, work: Callable[..., Any], *args: Any) -> Any: ...

    async def compact(self, key: ChatKey) -> CompactResult | None:
        """Rewrite one conversation's file without its torn, unreadable or incomplete lines.

        The valid lines (and the header: the epoch stays) are copied byte for byte (``seq``
        kept) to a temporary file in the same directory, fsynced, and renamed over the file,
        under the session's locks; readers see the old file or the new one. Nothing is
        rewritten when nothing needs dropping.

        Returns:
            What was done, or ``None`` when the conversation has no file.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            StorageUnavailableError: the file cannot be read or replaced, or the store is
                closed.
        """
        check_key(key)
        self._check_open()
        paths = self._paths(key)
        try:
            done = await self._locked(
                paths, compact_files, paths, [paths.data], self._writer.mark_synced
            )
        finally:
            self._forget(paths.data)
        return done[0] if done else None

    async def compact_all(self) -> list[CompactResult]:
        """:meth:`compact` every file under the root, one session at a time.

        Raises:
            StorageUnavailableError: a file cannot be read or replaced, or the store is closed.
        """
        self._check_open()
        results: list[CompactResult] = []
        sessions = await anyio.to_thread.run_sync(all_sessions, self.root)
        for user_dir, session_dir, files in sessions:
            paths = session_paths(user_dir, session_dir)
            try:
                done = await self._locked(
                    paths, compact_files, paths, files, self._writer.mark_synced
                )
            finally:
                self._forget(session_dir)
            results.extend(done)
        return results

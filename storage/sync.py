"""``SyncChatStorage``: the ``ChatStorage`` methods for callers without an event loop.

One anyio blocking portal (an event loop in one background thread, started on first use) runs
every call on the wrapped stack, so a stack's locks and connections only ever see that one loop.
Any number of threads may call the facade at once; the portal serializes nothing itself, the
calls run as concurrent tasks on the stack exactly as they would from async code.

Example::

    from storage import ChatKey, ChatMessage, SQLiteChatStorage
    from storage.sync import SyncChatStorage

    with SyncChatStorage(SQLiteChatStorage("chats.db")) as chats:
        key = ChatKey("user-1", "session-1", "support")
        chats.save(key, ChatMessage("user", "hello"))
        print(chats.fetch(key, limit=20))
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractContextManager
from functools import partial
from types import TracebackType
from typing import Self, TypeVar, TypeVarTuple

from anyio.from_thread import BlockingPortal, start_blocking_portal

from storage.errors import StorageUnavailableError
from storage.message import AgentMessage, ChatKey, ChatMessage
from storage.protocol import ChatStorage

__all__ = ["SyncChatStorage"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


async def _thread_id() -> int:
    return threading.get_ident()


def _close_at_exit(facade: SyncChatStorage) -> None:
    """Close ``facade`` when the interpreter exits, before it waits for the portal thread.

    The portal is a non-daemon worker thread: a script that never closes its facade would
    otherwise hang at exit. ``threading._register_atexit`` callbacks run (newest first)
    before non-daemon threads are joined, which plain ``atexit`` callbacks do not.
    """
    ref = weakref.ref(facade)

    def close() -> None:
        alive = ref()
        if alive is not None:
            alive.close()

    with contextlib.suppress(RuntimeError):  # the interpreter is already shutting down
        threading._register_atexit(close)  # type: ignore[attr-defined]


class SyncChatStorage:
    """Blocking versions of the ``ChatStorage`` methods, run on one portal thread.

    The portal thread starts on the first call (constructing the facade is free) and stops on
    :meth:`close`. Calls made while another thread's call is running proceed concurrently on
    the portal's loop. Do not call the facade from code already running on its own portal
    (that would wait on itself; anyio raises ``RuntimeError``), and do not use the same stack
    from an event loop of another backend at the same time (anyio locks bind to one backend).

    Args:
        stack: the store or layered stack to drive.
        backend: the anyio backend the portal runs (``"asyncio"`` or ``"trio"``).
        close_stack: whether :meth:`close` also closes ``stack`` (default ``True``: the facade
            owns the stack, as ``with SyncChatStorage(store):`` suggests).

    Raises:
        StorageUnavailableError: from any method once the facade is closed.
    """

    def __init__(
        self, stack: ChatStorage, *, backend: str = "asyncio", close_stack: bool = True
    ) -> None:
        self.stack = stack
        self.backend = backend
        self.close_stack = close_stack
        self._lock = threading.Lock()
        self._portal: BlockingPortal | None = None
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal_thread: int | None = None
        self._closed = False

    def _get_portal(self) -> BlockingPortal:
        portal = self._portal
        if portal is not None:
            return portal
        with self._lock:
            if self._closed:
                raise StorageUnavailableError("SyncChatStorage is closed")
            if self._portal is None:
                cm = start_blocking_portal(self.backend, name="chatlayers-sync-portal")
                portal = cm.__enter__()
                self._portal_thread = portal.call(_thread_id)
                self._portal_cm = cm
                self._portal = portal
                _close_at_exit(self)
            return self._portal

    def call(self, func: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
        """Run ``await func(*args)`` on the portal's loop and return its result.

        Exceptions raised by ``func`` propagate unchanged.

        Raises:
            StorageUnavailableError: the facade is closed.
        """
        portal = self._get_portal()
        try:
            return portal.call(func, *args)
        except RuntimeError as exc:
            # anyio's "This portal is not running": close() won a race with this call.
            if self._closed and "not running" in str(exc):
                raise StorageUnavailableError("SyncChatStorage is closed") from exc
            raise

    def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        """Blocking ``ChatStorage.save``: ``[stored]``, or ``[]`` for a dropped or repeated id."""
        return self.call(self.stack.save, key, message)

    def save_messages(self, key: ChatKey, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        """Blocking ``ChatStorage.save_messages``: the newly stored messages, in order."""
        return self.call(self.stack.save_messages, key, messages)

    def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        """Blocking ``ChatStorage.fetch``: oldest first, at most ``limit`` newest messages."""
        return self.call(partial(self.stack.fetch, key, limit=limit))

    def fetch_all_chats(self, user_id: str, session_id: str) -> list[AgentMessage]:
        """Blocking ``ChatStorage.fetch_all_chats``: every agent's raw messages, merged."""
        return self.call(self.stack.fetch_all_chats, user_id, session_id)

    def delete(self, key: ChatKey) -> None:
        """Blocking ``ChatStorage.delete``: erase one conversation."""
        self.call(self.stack.delete, key)

    def delete_user(self, user_id: str) -> None:
        """Blocking ``ChatStorage.delete_user``: erase every conversation of a user."""
        self.call(self.stack.delete_user, user_id)

    def close(self) -> None:
        """Close the stack (when ``close_stack``) and stop the portal thread; idempotent.

        Calls still running finish first; calls made afterwards raise
        ``StorageUnavailableError``. Called on the portal thread itself (a finalizer run by
        the garbage collector there, say), the shutdown is handed to a new thread, since a
        thread cannot wait for itself.
        """
        if self._portal_thread == threading.get_ident():
            threading.Thread(target=self.close, name="chatlayers-sync-close").start()
            return
        with self._lock:
            if self._closed:
                return
            self._closed = True
            portal, cm = self._portal, self._portal_cm
            self._portal = self._portal_cm = None
        try:
            if self.close_stack:
                if portal is not None:
                    portal.call(self.stack.aclose)
                else:
                    with start_blocking_portal(self.backend) as once:
                        once.call(self.stack.aclose)
        finally:
            if cm is not None:
                cm.__exit__(None, None, None)

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._closed

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._portal else "idle")
        return f"<SyncChatStorage {state} over {type(self.stack).__name__}>"

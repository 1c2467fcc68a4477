"""The background runner: summaries made in a task group the layer owns (``background=True``).

A save returns once its raw write is done; the summary it made due is scheduled here and made
in the runner's task group, at most one task per key at a time (a key already scheduled is not
scheduled again: when the messages saved during its call leave the view due, the task makes
the next summary before it ends, see :meth:`BaseViews._background_job
<storage.layers.summarizing.base_views.BaseViews._background_job>`). The group is the
user's to open (``async with layer:`` or ``async with layer.background_tasks():``, anyio, so it
works under trio too); a save or fetch before that is refused before anything is written.
Closing the group cancels the running summaries: nothing is lost (the raw record holds every
message, and no checkpoint is half written). :meth:`BackgroundRunner.drain` waits until none
is running.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import NoReturn, TypeVar

import anyio
from anyio.abc import TaskGroup

from storage.errors import ConfigError, SummarizerError
from storage.layers.summarizing.state import KeyState
from storage.message import ChatKey

__all__ = ["BackgroundRunner"]

log = logging.getLogger("storage.layers.summarizing")

S = TypeVar("S", bound=KeyState)


class BackgroundRunner:
    """Owns the task group background summaries run in, schedules them, and drains them."""

    __slots__ = ("_entered", "_idle", "_running", "_tasks")

    def __init__(self) -> None:
        self._tasks: TaskGroup | None = None
        self._entered: AbstractAsyncContextManager[None] | None = None
        self._running = 0
        self._idle = anyio.Event()

    @property
    def open(self) -> bool:
        """The task group is open: summaries can be scheduled."""
        return self._tasks is not None

    @staticmethod
    def refuse() -> NoReturn:
        """Raise the error of a use before the task group was opened.

        Raises:
            ConfigError: always.
        """
        raise ConfigError(
            "background=True: enter the layer first (`async with layer:` or "
            "`async with layer.background_tasks():`), so it owns the task group its "
            "summaries run in"
        )

    def schedule(
        self, state: S, key: ChatKey, job: Callable[[S, ChatKey], Awaitable[None]]
    ) -> None:
        """Run ``job(state, key)`` in the task group, unless one is scheduled for ``state``.

        Raises:
            ConfigError: the task group is not open.
        """
        tasks = self._tasks
        if tasks is None:
            self.refuse()
        if state.scheduled:
            return
        state.scheduled = True
        self._running += 1
        tasks.start_soon(self._run, state, key, job)

    async def _run(
        self, state: S, key: ChatKey, job: Callable[[S, ChatKey], Awaitable[None]]
    ) -> None:
        try:
            await job(state, key)
        except SummarizerError:
            pass  # counted and logged by the policy; the next trigger retries
        except Exception:  # a store error: nothing is lost, the next trigger retries
            log.exception("background summary of %r failed", key)
        finally:
            state.scheduled = False
            self._running -= 1
            if not self._running:
                self._idle.set()
                self._idle = anyio.Event()

    @asynccontextmanager
    async def tasks(self) -> AsyncIterator[None]:
        """Own the task group for the block; summaries still running at its end are
        cancelled.

        Raises:
            ConfigError: the task group is already open.
        """
        if self._tasks is not None:
            raise ConfigError("this layer's background task group is already open")
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            try:
                yield
            finally:
                self._tasks = None
                tasks.cancel_scope.cancel()

    async def enter(self) -> None:
        """Open the task group until :meth:`close` (``async with layer:``).

        Raises:
            ConfigError: the task group is already open.
        """
        if self._tasks is not None:
            raise ConfigError("this layer's background task group is already open")
        entered = self.tasks()
        await entered.__aenter__()
        self._entered = entered

    async def close(self) -> None:
        """Close the task group :meth:`enter` opened (a no-op when there is none)."""
        entered, self._entered = self._entered, None
        if entered is not None:
            await entered.__aexit__(None, None, None)

    async def drain(self) -> None:
        """Wait until no background summary is running (new ones may start after)."""
        while self._running:
            await self._idle.wait()

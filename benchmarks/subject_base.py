"""The base of what gets measured: a store under a name, with per-call operations.

A subject holds conversations under string keys (``"h1000"``) and gives per-call operations:
``fetch_op(key, limit)`` and ``append_op(key, batch)``. Operations are sync or async as the
subject's own API is (``is_async``); loading data (``load``) is never timed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar

from benchmarks.data import Wire
from storage.message import ChatKey

__all__ = ["LOAD_CHUNK", "Op", "Prepare", "Subject", "Unavailable", "chat_key"]

Op = Callable[[], Any]
Prepare = Callable[[int], Awaitable[None]]
LOAD_CHUNK = 1000


class Unavailable(Exception):
    """A subject cannot run here (package missing, server unreachable); the text says why."""


class Subject:
    """Base: a store under a name, with its own files under ``workdir``."""

    name: ClassVar[str] = "?"
    group: ClassVar[str] = "peer"  # "floor" | "ours" | "peer"
    is_async: ClassVar[bool] = True
    max_size: ClassVar[int] = 10_000
    # Cases this subject can run; "crowded" needs a database shared by many sessions.
    cases: ClassVar[frozenset[str]] = frozenset(
        {"fetch_all", "fetch_last", "append_one", "append_batch", "crowded", "concurrent"}
    )
    note: ClassVar[str] = ""
    durable: ClassVar[bool] = False  # appends fsync on commit (compared to the fsync floor)
    append_max_size: ClassVar[int | None] = None  # default: max_size
    shares: ClassVar[type[Subject] | None] = None  # reads another subject's files, loads nothing
    counterpart: ClassVar[str] = ""  # a peer: the chatlayers store of the same kind
    batch_max_size: ClassVar[int] = 10**9  # largest history a batch append is measured at
    batch_note: ClassVar[str] = ""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def native(self, wire: Wire) -> Any:
        """The subject's own message object for one OpenAI message dict."""
        return wire

    async def load(self, key: str, wires: list[Wire]) -> None:
        raise NotImplementedError

    def fetch_op(self, key: str, limit: int | None) -> Op:
        raise NotImplementedError

    def _append(self, key: str, item: Any) -> Any:
        raise NotImplementedError

    def _append_many(self, key: str, items: list[Any]) -> Any:
        raise NotImplementedError

    def append_op(
        self, key: str, batch: int, source: Callable[[int], list[Wire]]
    ) -> tuple[Op, Prepare]:
        """An op appending one message (``batch == 1``) or a batch, and its untimed preparer.

        ``source(n)`` yields fresh wire messages; the preparer converts them to native objects
        before each round so conversion is never on the clock.
        """
        pool: deque[Any] = deque()

        async def prepare(calls: int) -> None:
            pool.clear()
            wires = source(calls * batch)
            natives = [self.native(w) for w in wires]
            if batch == 1:
                pool.extend(natives)
            else:
                pool.extend(natives[i : i + batch] for i in range(0, len(natives), batch))

        pop = pool.popleft
        if batch == 1:
            append = self._append
            return (lambda: append(key, pop())), prepare
        append_many = self._append_many
        return (lambda: append_many(key, pop())), prepare


def chat_key(key: str) -> ChatKey:
    return ChatKey("bench-user", key, "agent")

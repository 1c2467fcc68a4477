"""Run a call with little stack left, to prove a read needs a bounded number of frames."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

__all__ = ["at_headroom", "frames"]


def frames() -> int:
    """The number of Python frames on the current thread's call stack."""
    frame, count = sys._getframe(), 0
    while frame is not None:
        count, frame = count + 1, frame.f_back  # type: ignore[assignment]
    return count


async def at_headroom(headroom: int, call: Callable[[], Awaitable[T]]) -> T:
    """Await ``call()`` from a call stack with only about ``headroom`` frames left before
    ``sys.getrecursionlimit()``.

    A trace function on this thread (coverage's tracer, a debugger) is paused meanwhile:
    tracing makes CPython count more per call, and the bound is about the code's own frames.
    """
    tracer = sys.gettrace()
    sys.settrace(None)
    try:
        return await _descend(sys.getrecursionlimit() - headroom, call)
    finally:
        sys.settrace(tracer)


async def _descend(target: int, call: Callable[[], Awaitable[T]]) -> T:
    if frames() < target:
        return await _descend(target, call)
    return await call()

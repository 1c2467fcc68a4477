"""The walk of one configuration through ``storage/config/``: which files its calls visit.

:func:`trace_walk` runs a callable (``open_storage(url)``) under :func:`sys.setprofile` and
keeps, in order, the file of every Python function called in the ``storage.config``
package (calls elsewhere, in layers, stores or the standard library, are not counted and do
not interrupt a stay). From that sequence:

- a **stay** is a maximal run of consecutive calls in one file;
- a **return** is a stay in a file the walk had already left before;
- ``returns == stays - files``.

A reader following one configuration from ``open_storage`` to the built stack reads one
file per stay: the fewer stays, the fewer jumps. The walk is deterministic for a given
configuration once the modules it needs are imported (run the callable once first).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import attrs

import storage.config

CONFIG_DIR = str(Path(storage.config.__file__).parent) + os.sep


@attrs.frozen
class Stay:
    """Consecutive calls in one file: the file (relative to ``storage/config/``) and the
    functions called there, in order."""

    file: str
    functions: tuple[str, ...]


@attrs.frozen
class Walk:
    """The stays of one traced call, in order."""

    stays: tuple[Stay, ...]

    @classmethod
    def of(cls, calls: Sequence[tuple[str, str]]) -> Walk:
        """The walk of a sequence of ``(file, function)`` calls."""
        runs: list[tuple[str, list[str]]] = []
        for file, function in calls:
            if runs and runs[-1][0] == file:
                runs[-1][1].append(function)
            else:
                runs.append((file, [function]))
        return cls(tuple(Stay(file, tuple(functions)) for file, functions in runs))

    @property
    def files(self) -> int:
        """How many different files the walk visits."""
        return len({stay.file for stay in self.stays})

    @property
    def returns(self) -> int:
        """How many stays are in a file already left before."""
        return len(self.stays) - self.files

    def figures(self) -> tuple[int, int, int]:
        """``(stays, files, returns)``."""
        return len(self.stays), self.files, self.returns

    def render(self) -> str:
        """One line per stay (for an assertion message)."""
        head = "{} stays in {} files, {} returns".format(*self.figures())
        lines = [f"  {stay.file}: {', '.join(stay.functions)}" for stay in self.stays]
        return "\n".join([head, *lines])


def trace_walk(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Walk:
    """Call ``function(*args, **kwargs)`` and return the walk of its calls in
    ``storage/config/`` (an exception it raises propagates after tracing stops)."""
    calls: list[tuple[str, str]] = []

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            file = frame.f_code.co_filename
            if file.startswith(CONFIG_DIR):
                calls.append((file[len(CONFIG_DIR) :], frame.f_code.co_name))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        function(*args, **kwargs)
    finally:
        sys.setprofile(previous)
    return Walk.of(calls)

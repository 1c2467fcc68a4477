"""The decoded-line cache: messages keyed by their line's exact bytes, per file, in a byte
budget shared by every file of a store.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

from storage.stores.jsonl.lines import Entry


class LineCache:
    """Decoded lines keyed by their exact bytes, per file; least recently read files leave first.

    A line's bytes determine its message (the codec is deterministic, messages are immutable),
    so an entry can never be stale, whatever another process does to the file: a rewritten or
    recreated file simply stops matching. Parsing and building messages is most of a read's
    cost; a warm read only splits lines and looks them up. One file may fill at most half of
    the budget (its newest lines win).

    Args:
        max_bytes: the budget in bytes of line text; 0 disables the cache.

    Raises:
        ValueError: ``max_bytes`` < 0.
    """

    __slots__ = ("_files", "_lock", "_size", "max_bytes")

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"cache_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self._files: OrderedDict[str, tuple[dict[bytes, Entry], list[int]]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()  # full reads of big files run on worker threads

    def lines(self, path: str) -> dict[bytes, Entry] | None:
        """The cached lines of a file (marking it recently read), or ``None``."""
        with self._lock:
            got = self._files.get(path)
            if got is None:
                return None
            self._files.move_to_end(path)
            return got[0]

    def add(self, path: str, newest_first: list[tuple[bytes, Entry]]) -> None:
        """Cache lines just decoded from a file, newest first (they win when room is short)."""
        if not self.max_bytes or not newest_first:
            return
        room = self.max_bytes // 2
        with self._lock:
            got = self._files.get(path)
            if got is None:
                got = self._files[path] = ({}, [0])
            else:
                self._files.move_to_end(path)
            lines, size = got
            if size[0] + sum(len(line) for line, _ in newest_first) > room:
                self._size -= size[0]  # the file outgrew its share: keep its newest lines
                lines.clear()
                size[0] = 0
            for line, entry in newest_first:
                if size[0] + len(line) > room:
                    break
                if line not in lines:
                    lines[line] = entry
                    size[0] += len(line)
                    self._size += len(line)
            while self._size > self.max_bytes and len(self._files) > 1:
                _, (_, old) = self._files.popitem(last=False)
                self._size -= old[0]

    def drop(self, prefix: str) -> None:
        """Forget every file equal to or under ``prefix`` (erased data leaves memory too)."""
        with self._lock:
            for path in [p for p in self._files if p == prefix or p.startswith(prefix + os.sep)]:
                self._size -= self._files.pop(path)[1][0]

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._files.clear()
            self._size = 0

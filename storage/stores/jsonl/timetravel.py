"""Rewinds of the JSONL store: the key's file rewritten whole under the session's flock.

The new file (temporary file, fsync, rename: readers see the old file or the new one) holds
every line of the old one byte for byte, batch marks dropped, except that each message the
rewind hides becomes a hidden line and the header becomes a version-2 header holding the
rewinds (:mod:`storage.stores.jsonl.lines`). The file's own epoch stays; the key's epoch
gains the rewind's part, so every cache rebuilds. A checkpoint covering only kept messages is
stored again as the next version under the new epoch; one covering a hidden message is left
as it is (void: of the old epoch).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

import attrs

from storage.abilities import Rewind
from storage.message import ChatKey, ChatMessage
from storage.stores.base import not_in_view
from storage.stores.jsonl import checkpoints
from storage.stores.jsonl.checkpoints import CheckpointReader
from storage.stores.jsonl.header import file_epoch, format_header, head_epoch
from storage.stores.jsonl.lines import hide_line, single_line
from storage.stores.jsonl.locks import flock, read_counter, reserve
from storage.stores.jsonl.names import Paths
from storage.stores.jsonl.rewrite import read_whole, write_file

__all__ = ["rewind_key"]

Forget = Callable[[Paths], None]


def rewind_key(
    paths: Paths,
    key: ChatKey,
    to: str,
    rewind_id: str,
    now: datetime,
    reader: CheckpointReader,
    forget: Forget,
    sync_dir: bool,
) -> int:
    """Hide the view's messages after message ``to``, under the session's flock; how many.

    Raises:
        InvalidArgumentError: ``to`` is not a message of the view (nothing changed).
        OSError: a file cannot be read or written.
    """
    with flock(paths, make_dirs=False) as lock_fd:
        if lock_fd is None:
            raise not_in_view(key, to)  # no session: the key holds nothing
        try:
            data, found = read_whole(paths.data)
            view = [
                (offset, seq, item)
                for offset, seq, item in found.entries
                if type(item) is ChatMessage
            ]
            at = next((i for i, (_, _, m) in enumerate(view) if m.id == to), None)
            if at is None:
                raise not_in_view(key, to)
            hidden = view[at + 1 :]
            if not hidden:
                return 0
            seq = max(read_counter(lock_fd), found.max_seq) + 1
            reserve(lock_fd, seq)
            rewind = Rewind(to, view[at][1], hidden[-1][1], len(hidden), now, seq, rewind_id)
            old_epoch = found.epoch
            rewinds = (*found.rewinds, rewind)
            base = file_epoch(old_epoch)
            hide = {offset for offset, _, _ in hidden}
            lines = []
            for offset, _, _ in found.entries:
                end = data.find(b"\n", offset)
                line = single_line(data[offset : end if end >= 0 else len(data)])
                lines.append((hide_line(line, seq) if offset in hide else line) + b"\n")
            write_file(paths, format_header(base, rewinds) + b"".join(lines))
            current = reader.read(paths.ckpt)
            if (
                current is not None
                and current.epoch == old_epoch
                and current.covers_to <= rewind.to_seq
            ):
                kept = attrs.evolve(
                    current, epoch=head_epoch(base, rewinds), version=current.version + 1
                )
                checkpoints.store(paths, kept, sync_dir=sync_dir)
            return len(hidden)
        finally:
            forget(paths)

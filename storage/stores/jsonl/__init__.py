"""``jsonl://PATH``: one append-only JSON-lines file per conversation, safe across processes.

Layout (``names``)::

    PATH/<user>/<session>/.lock            flock + the session's sequence counter
    PATH/<user>/<session>/.summary         cached counts and times per file (``sessions``)
    PATH/<user>/<session>/<agent>.jsonl    the conversation: a header, then one line per
                                           message or record
    PATH/<user>/<session>/<agent>.key      only when a part was hashed: the full key (JSON)
    PATH/<user>/<session>/<agent>.ckpt     the summary checkpoint (``checkpoints``)
    PATH/<user>/<session>/<agent>.lease    the summarizing lease (``leases``)

Directories are created 0700 and files 0600; ``PATH`` itself by the first write (building
the store touches nothing, and reads of a missing ``PATH`` find an empty store). A file starts
with a header naming the key's epoch; each other line (``lines``) is the codec record
(``storage.codec``) with the store's fields spliced in front, or an application record
(``"rec":1``)::

    {"hdr":1,"epoch":"9f86d081884c7d659a2feaa0c55ad015"}
    {"seq":1718000000000001,"to":1718000000000003,"v":1,"id":"...","at":"...","m":{...}}
    {"seq":1718000000000004,"rec":1,"id":"...","kind":"tool_approval","at":"...","data":{}}

``seq`` is unique and increasing within a session (all agents, messages and records alike),
reserved under the session's flock in commit order, so ``fetch_all_chats`` merges agents in
save order and a reader tailing by ``seq`` (``fetch_since``) never misses a line committed
later. ``to`` marks the lines of a multi-message batch that are not its last (it names the
batch's last ``seq``): a reader keeps a batch only when all of its lines are there, so a batch
is never half visible, not even while it is being written or after a crash. A line that does
not decode (a torn tail left by a crash, an edit) is skipped with a warning logged once per
process (logger ``storage.stores.jsonl``). The next writer ends a torn tail with `` torn`` and
a newline (just a newline when it is a whole record that only lacked it), so its own lines
start fresh and the fragment can never parse; :meth:`JsonlChatStorage.compact` removes such
lines.

The epoch (``Head.epoch``) is random and written once, with a file's first line; whatever
removes messages (``replace``, a retention purge) rewrites the file whole (``rewrite``:
temporary file, fsync, rename) with a new one and drops the checkpoint; ``delete`` removes
the file. A file written before headers takes its epoch from its first ``seq``.

Writes (``writer``): one ``write(2)`` of whole lines per save, under an in-process
per-session lock and an ``fcntl.flock`` on the session's ``.lock`` across processes
(``locks``). Before appending, the writer brings its cached view of the file's message ids up
to date under the flock (only the bytes other processes appended since are read), so a
retried id is a no-op across processes too. Checkpoints, leases and rewrites change files
only under the same flock. Reads (``reads``, ``cache``) take no lock. Small appends and reads
run on the event-loop thread, whatever could block on one worker-thread hop (``store``).

POSIX only (``fcntl.flock``), on a local file system: over NFS, flock is emulated with fcntl
locks, which do not exclude two descriptors of one process and drop when any one is closed.

Modules: ``store`` (the class), ``names`` (key parts to file names, the key sidecar),
``lines`` (the line format, parsing, the forward scan), ``reads`` (whole, tail, head and
session reads), ``cache`` (decoded lines), ``writer`` (appends, the fsync policy), ``locks``
(session locks, the seq counter), ``rewrite`` (replace, purge, removing a key),
``checkpoints``, ``leases``, ``sessions`` (the listing summaries), ``compact``, ``tree``
(walking the root), ``fsutil``.
"""

from storage.stores.jsonl.compact import CompactResult
from storage.stores.jsonl.names import MAX_NAME, decode_name, encode_name
from storage.stores.jsonl.store import JsonlChatStorage
from storage.stores.jsonl.writer import FsyncPolicy

__all__ = [
    "MAX_NAME",
    "CompactResult",
    "FsyncPolicy",
    "JsonlChatStorage",
    "decode_name",
    "encode_name",
]

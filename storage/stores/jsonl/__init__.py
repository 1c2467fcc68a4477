"""``jsonl://PATH``: one append-only JSON-lines file per conversation, safe across processes.

Layout (``names``)::

    PATH/<user>/<session>/.lock            flock + the session's sequence counter
    PATH/<user>/<session>/<agent>.jsonl    the conversation, one message per line
    PATH/<user>/<session>/<agent>.key      only when a part was hashed: the full key (JSON)

Directories are created 0700 and files 0600. A line (``lines``) is the codec record
(``storage.codec``) with the store's fields spliced in front::

    {"seq":1718000000000001,"to":1718000000000003,"v":1,"id":"...","at":"...","m":{...}}

``seq`` is unique and increasing within a session (all agents), so ``fetch_all_chats`` merges
agents in save order. ``to`` marks the lines of a multi-message batch that are not its last
(it names the batch's last ``seq``): a reader keeps a batch only when all of its lines are
there, so a batch is never half visible, not even while it is being written or after a crash.
A line that does not decode (a torn tail left by a crash, an edit) is skipped with a warning
logged once per process (logger ``storage.stores.jsonl``). The next writer ends a torn tail
with `` torn`` and a newline (just a newline when it is a whole record that only lacked it),
so its own lines start fresh and the fragment can never parse;
:meth:`JsonlChatStorage.compact` removes such lines.

Writes (``writer``): one ``write(2)`` of whole lines per save, under an in-process
per-session lock and an ``fcntl.flock`` on the session's ``.lock`` across processes
(``locks``). Before appending, the writer brings its cached view of the file's message ids up
to date under the flock (only the bytes other processes appended since are read), so a
retried id is a no-op across processes too. Reads (``reads``, ``cache``) take no lock. Small
appends and reads run on the event-loop thread, whatever could block on one worker-thread hop
(``store``).

POSIX only (``fcntl.flock``), on a local file system: over NFS, flock is emulated with fcntl
locks, which do not exclude two descriptors of one process and drop when any one is closed.

Modules: ``store`` (the class), ``names`` (key parts to file names, the key sidecar),
``lines`` (the line format, parsing, the forward scan), ``reads`` (whole, tail and session
reads), ``cache`` (decoded lines), ``writer`` (appends, the fsync policy), ``locks``
(session locks, the seq counter), ``compact``, ``tree`` (walking the root), ``fsutil``.
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

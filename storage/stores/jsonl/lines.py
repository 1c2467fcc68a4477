"""The line format: a codec record with the store's ``seq`` / ``to`` fields spliced in front.

::

    {"hdr":1,"epoch":"9f86d081884c7d659a2feaa0c55ad015"}
    {"seq":1718000000000001,"to":1718000000000003,"v":1,"id":"...","at":"...","m":{...}}
    {"seq":1718000000000004,"rec":1,"id":"...","kind":"tool_approval","at":"...","data":{...}}

The first line of a file is its header: the key's epoch (random, new whenever the file is
rewritten without some of its messages). A file without one (written before headers, or whose
first write was torn) takes its epoch from its first line's ``seq`` (:func:`fallback_epoch`).
Record lines (``"rec":1``) hold application records: they share the session's ``seq`` and are
skipped by every message read.

``seq`` is unique and increasing within a session (all agents). ``to`` marks the lines of a
multi-message batch that are not its last (it names the batch's last ``seq``): a reader keeps
a batch only when all of its lines are there, so a batch is never half visible. A line that
does not decode (a torn tail left by a crash, an edit) is skipped; the next writer ends a torn
tail with :data:`TORN_MARK` (just a newline when it is a whole record that only lacked it).

Format versions: the header's ``hdr`` and each message line's ``v`` (the codec's) are 1. A
header or line of a newer version (written by a newer chatlayers) raises
``SchemaVersionError`` wherever it is read (a line by every read that reaches it, the header
by whole reads, heads and tails after a sequence number) and by the writer before it
appends, so such a file is never misread nor written into.

Rewinds (this release) write the only version-2 lines, and only into a file that was
rewound, so every other file stays readable by older releases while a rewound one is refused
by them wherever they would misread it. A rewind rewrites the file whole (temporary file,
rename), its lines byte for byte except that each message it hides becomes a *hidden line*,
``{"seq":N,"v":2,"rw":R,"id":...}`` (the message's own line with ``"v":1,`` replaced by
``"v":2,"rw":R,``, ``R`` the rewind's ``seq``), and the header becomes version 2, holding the
key's rewinds::

    {"hdr":2,"epoch":"9f86...","rewinds":[{"id":"...","seq":...,"to_id":"...",...}]}

The key's epoch (``Head.epoch``) is then ``<epoch>r<seq of the newest rewind>``: a new one
per rewind, while the file's own epoch part says the record was not renumbered (a
checkpoint a rewind voided keeps counting its version, :mod:`.checkpoints`). A hidden line
is recognised by its own bytes, so tail reads need no header to leave it out.

This module writes lines (:func:`format_batch`), parses them (fully, or only the head and id
for the writer's duplicate check), splits a file or a buffer into lines, and keeps the valid
ones in a forward pass (:func:`scan`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Final, TypeVar

import attrs

from storage.abilities import ConversationRecord, Rewind
from storage.codec import check_format_version, decode, encode
from storage.errors import CorruptRecordError
from storage.message import ChatMessage
from storage.stores.jsonl.header import (
    _ANY_HDR,
    head_epoch,
    parse_full_header,
)
from storage.stores.payloads import decode_record, record_fields
from storage.stores.times import to_us

T = TypeVar("T")
Parsed = tuple[int, int | None, T]  # (seq, to, payload) of a valid line
Line = tuple[int, bytes, bool]  # (offset, bytes without the newline, terminated)

_SEQ: Final = b'{"seq":'
_TO: Final = b'"to":'
_ID: Final = b'"v":1,"id":"'  # what codec.encode writes first; anything else takes the slow path
TORN_MARK: Final = b" torn\n"  # ends a torn tail the next writer found: never valid JSON after it
_REC: Final = b'"rec":1,'
_HID: Final = b'"v":2,"rw":'
_V1: Final = b'"v":1,'


@attrs.frozen(slots=True)
class Hidden:
    """A message a rewind hid, as its hidden line holds it (never part of the view)."""

    message: ChatMessage
    rewind_seq: int


Item = ChatMessage | ConversationRecord | Hidden
Entry = Parsed[Item]


IdKey = str | tuple[str, str]  # a message id, or ("rec", id) for a record: never equal


def record_key(record_id: str) -> tuple[str, str]:
    """A record's id as the writer's duplicate check keeps it, apart from message ids."""
    return ("rec", record_id)


def hide_line(line: bytes, rewind_seq: int) -> bytes:
    """The hidden line of a message line without a batch mark (:func:`single_line`)."""
    head = _head(line)
    assert head is not None
    assert head[1] is None
    assert line.startswith(_V1, head[2])
    return b'{"seq":%d,%b%d,%b' % (head[0], _HID, rewind_seq, line[head[2] + len(_V1) :])


def _unhide(line: bytes, start: int) -> tuple[int, bytes] | None:
    """``(rewind seq, the message's own line)`` of a hidden line whose store fields end at
    ``start``, or ``None`` when it is not one."""
    if not line.startswith(_HID, start):
        return None
    begin = start + len(_HID)
    comma = line.find(b",", begin)
    try:
        rewind_seq = int(line[begin:comma]) if comma > begin else -1
    except ValueError:
        return None
    if rewind_seq < 0:
        return None
    return rewind_seq, line[:start] + _V1 + line[comma + 1 :]


def fallback_epoch(seq: int) -> str:
    """The epoch of a file without a header whose first line has ``seq``."""
    return f"s{seq}"


def first_seq(line: bytes) -> int | None:
    """The ``seq`` a line starts with, or ``None``."""
    head = _head(line)
    return None if head is None else head[0]


def format_record(seq: int, record: ConversationRecord) -> bytes:
    """The line of an application record (with its newline); ``created_at`` must be set.

    Raises:
        TypeError, ValueError: ``data`` is not JSON data.
    """
    return b'{"seq":%d,%b%b}\n' % (seq, _REC, record_fields(record).encode("utf-8"))


def single_line(line: bytes) -> bytes:
    """A valid line without its batch mark (``to``): for files rewritten whole, where a batch
    needs no mark (the rename makes it atomic) and some of its lines may be gone."""
    head = _head(line)
    if head is None or head[1] is None:
        return line
    return b'{"seq":%d,%b' % (head[0], line[head[2] :])


def _decode_record(seq: int, line: bytes) -> ConversationRecord:
    return decode_record(line, seq)


def format_batch(first: int, messages: Sequence[ChatMessage]) -> list[bytes]:
    """The lines of a batch, ``seq`` from ``first`` on, each ending with a newline."""
    last = first + len(messages) - 1
    lines = []
    for n, message in enumerate(messages):
        record = encode(message)[1:].encode("utf-8")
        seq = first + n
        if seq < last:
            lines.append(b'{"seq":%d,"to":%d,%b\n' % (seq, last, record))
        else:
            lines.append(b'{"seq":%d,%b\n' % (seq, record))
    return lines


def _head(line: bytes) -> tuple[int, int | None, int] | None:
    """``(seq, to, end of the store's fields)`` of a line, or ``None`` when it is not ours."""
    if not line.startswith(_SEQ):
        return None
    comma = line.find(b",", 7)
    if comma < 0:
        return None
    try:
        seq = int(line[7:comma])
        if line.startswith(_TO, comma + 1):
            end = line.find(b",", comma + 6)
            if end < 0:
                return None
            return seq, int(line[comma + 6 : end]), end + 1
    except ValueError:
        return None
    return seq, None, comma + 1


def _quick_id(line: bytes, start: int) -> str | None:
    """The message id of a well-formed line without parsing the JSON (``None``: not a record).

    The writer's duplicate check uses this; it accepts a line that ends with ``}`` and has an
    id, which every line this store writes and every torn tail it marked satisfy or fail
    exactly as a full decode does.
    """
    if not line.endswith(b"}"):
        return None
    if line.startswith(_ID, start):
        begin = start + len(_ID)
        end = line.find(b'"', begin)
        raw = line[begin:end]
        if end > 0 and b"\\" not in raw:
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                return None
    try:
        raw = json.loads(line)
        value = raw.get("id")
    except (ValueError, AttributeError, RecursionError):
        return None
    version = raw.get("v")
    if version != 1:
        check_format_version(version, "a JSONL line")  # never append after a newer line
    return value if isinstance(value, str) else None


def parse_id(line: bytes) -> Parsed[IdKey] | None:
    """``(seq, to, message id)`` of a line, checked cheaply (see :func:`_quick_id`); a
    record's id comes as :func:`record_key`; a hidden message's id as any message's."""
    head = _head(line)
    if head is None:
        return None
    hidden = _unhide(line, head[2])
    if hidden is not None:
        if head[1] is not None:
            return None
        found = _quick_id(hidden[1], head[2])
        return None if found is None else (head[0], None, found)
    if line.startswith(_REC, head[2]):
        if head[1] is not None:
            return None
        parsed = decode_entry(line)
        if parsed is None or not isinstance(parsed[2], ConversationRecord):
            return None
        return head[0], None, record_key(parsed[2].id)
    found = _quick_id(line, head[2])
    return None if found is None else (head[0], head[1], found)


def decode_entry(line: bytes) -> Entry | None:
    """``(seq, to, message or record)`` of a line, fully decoded, or ``None`` when it does
    not decode."""
    head = _head(line)
    if head is None:
        return None
    try:
        if line.startswith(_REC, head[2]):
            if head[1] is not None:
                return None
            return head[0], None, _decode_record(head[0], line)
        hidden = _unhide(line, head[2])
        if hidden is not None:
            if head[1] is not None:
                return None
            message = decode(hidden[1].decode("utf-8"))
            return head[0], None, Hidden(message, hidden[0])
        # json.loads on str skips its encoding sniffing: a third faster than on bytes.
        return head[0], head[1], decode(line.decode("utf-8"))
    except (CorruptRecordError, UnicodeDecodeError):
        return None


def parse_torn_id(line: bytes) -> Parsed[object] | None:
    """A torn tail counts only if it decodes fully (it lacks just its newline)."""
    parsed = decode_entry(line)
    if parsed is None:
        return None
    item = parsed[2]
    if type(item) is Hidden:
        return parsed[0], parsed[1], item.message.id
    assert isinstance(item, ChatMessage | ConversationRecord)
    return parsed[0], parsed[1], item.id if type(item) is ChatMessage else record_key(item.id)


def continues(prev_seq: int, prev_to: int, seq: int, to: int | None) -> bool:
    """Whether a line ``(seq, to)`` is the next line of the batch ``prev`` belongs to."""
    return seq == prev_seq + 1 and (to == prev_to if to is not None else seq == prev_to)


def read_lines(fd: int, start: int, end: int, chunk: int = 1 << 20) -> Iterator[Line]:
    """Every line of ``fd`` in ``[start, end)``, read in chunks; a final segment without its
    newline (a torn tail, or a whole record missing only the newline) comes last, unterminated.
    """
    pos = start
    pieces: list[bytes] = []  # a line longer than a chunk, gathered without quadratic copies
    line_at = start
    while pos < end:
        buf = os.pread(fd, min(chunk, end - pos), pos)
        if not buf:
            break  # the file shrank under us: stop at what is there
        buf_at = pos
        pos += len(buf)
        i = 0
        find = buf.find
        while (j := find(b"\n", i)) >= 0:
            if pieces:
                pieces.append(buf[:j])
                yield line_at, b"".join(pieces), True
                pieces.clear()
            else:
                yield buf_at + i, buf[i:j], True
            i = j + 1
            line_at = buf_at + i
        if i < len(buf):
            pieces.append(buf[i:] if i else buf)
    if pieces:
        yield line_at, b"".join(pieces), False


def memory_lines(data: bytes) -> Iterator[Line]:
    """Every line of a file's bytes already in memory, as :func:`read_lines` yields them."""
    pos = 0
    while (end := data.find(b"\n", pos)) >= 0:
        yield pos, data[pos:end], True
        pos = end + 1
    if pos < len(data):
        yield pos, data[pos:], False


@attrs.define(slots=True)
class Scan:
    """What a forward pass over lines found: valid entries, skipped offsets, highest seq."""

    entries: list[tuple[int, int, object]] = attrs.Factory(list)  # (offset, seq, payload)
    skipped: list[int] = attrs.Factory(list)
    max_seq: int = 0
    last_valid_end: int = 0  # offset just past the last valid line
    last_line_at: int = -1  # offset of the last line seen
    open_tail: bool | None = None  # a final unterminated segment: whether it is a record
    header: str | None = None  # the key's epoch the header gives (when the scan started at 0)
    header_line: bytes | None = None  # the header line itself (without its newline)
    rewinds: tuple[Rewind, ...] = ()  # the rewinds the header holds
    first_seq: int | None = None  # seq of the first line with one (a headerless file's epoch)

    @property
    def epoch(self) -> str:
        """The file's epoch (a scan from offset 0): its header's, or from its first seq."""
        if self.header is not None:
            return self.header
        return "" if self.first_seq is None else fallback_epoch(self.first_seq)


def scan(
    lines: Iterator[Line],
    parse: Callable[[bytes], Parsed[object] | None],
    open_parse: Callable[[bytes], Parsed[object] | None] | None = None,
) -> Scan:
    """Forward pass: keep single lines and complete batches, skip the rest.

    ``open_parse`` (default ``parse``) judges a final unterminated segment: the writer checks
    every other line cheaply but decodes a torn tail fully.
    """
    out = Scan()
    pending: list[_Pending] = []
    entries = out.entries
    for offset, line, terminated in lines:
        out.last_line_at = offset
        if not offset and terminated and line.startswith(_ANY_HDR) and _take_header(out, line):
            continue
        if out.first_seq is None and out.header is None:
            out.first_seq = first_seq(line)
        if terminated:
            parsed = parse(line)
        else:
            parsed = (open_parse or parse)(line)
            out.open_tail = parsed is not None
        end = offset + len(line) + 1
        if parsed is not None:
            seq, to, payload = parsed
            top = seq if to is None or to < seq else to
            if top > out.max_seq:
                out.max_seq = top
            if pending and _continue_batch(out, pending, (offset, seq, to, payload, end)):
                continue
            if to is None:
                entries.append((offset, seq, payload))
                out.last_valid_end = end
            elif to > seq:
                pending.append((offset, seq, to, payload, end))
            else:
                out.skipped.append(offset)
        else:
            _drop_batch(out, pending)
            if line:
                out.skipped.append(offset)
    _drop_batch(out, pending)  # a batch cut short at the end of the file
    return out


# A line of a batch not yet complete: (offset, seq, to, payload, end offset).
_Pending = tuple[int, int, int | None, object, int]


def _take_header(out: Scan, line: bytes) -> bool:
    """Read the header line at offset 0 into ``out`` (its epoch, the line, the rewinds it
    holds); whether it was one (a newer one raises)."""
    parsed_header = parse_full_header(line)
    if parsed_header is None:
        return False
    out.header = head_epoch(*parsed_header)
    out.header_line = line
    out.rewinds = parsed_header[1]
    out.last_valid_end = len(line) + 1
    return True


def _continue_batch(out: Scan, pending: list[_Pending], line: _Pending) -> bool:
    """Add ``line`` to the batch in progress when it continues it (the batch's entries go to
    ``out`` once its last line is in); otherwise skip the unfinished batch. Whether ``line``
    was taken."""
    _, p_seq, p_to, _, _ = pending[-1]
    _, seq, to, _, end = line
    if continues(p_seq, p_to, seq, to):  # type: ignore[arg-type]
        pending.append(line)
        if to is None:
            out.entries.extend((o, s, p) for o, s, _, p, _ in pending)
            out.last_valid_end = end
            pending.clear()
        return True
    _drop_batch(out, pending)
    return False


def _drop_batch(out: Scan, pending: list[_Pending]) -> None:
    """Skip the lines of an unfinished batch."""
    if pending:
        out.skipped.extend(p[0] for p in pending)
        pending.clear()


_AT: Final = b'","at":"'


def parse_time(line: bytes) -> Parsed[int | None] | None:
    """``(seq, to, created_at in µs since the Unix epoch)`` of a message line, ``(seq, None,
    None)`` for a record line, ``None`` for a line that is not valid; checked cheaply, as
    :func:`parse_id` does (counts and times of ``list_sessions`` and retention)."""
    head = _head(line)
    if head is None:
        return None
    seq, to, start = head
    if line.startswith(_REC, start):
        return (seq, None, None) if to is None and line.endswith(b"}") else None
    hidden = _unhide(line, start)
    if hidden is not None:
        if to is not None:
            return None
        line = hidden[1]
    if _quick_id(line, start) is None:
        return None
    begin = line.find(_AT, start)
    try:
        if begin > 0:
            begin += len(_AT)
            at = datetime.fromisoformat(line[begin : line.index(b'"', begin)].decode("ascii"))
        else:
            at = datetime.fromisoformat(json.loads(line)["at"])
        return seq, to, to_us(at)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None

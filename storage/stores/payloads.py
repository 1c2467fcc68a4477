"""JSON payloads of what stores keep beside messages: summary checkpoints and records.

One spelling is written; every spelling a release ever wrote is read, so old data keeps
reading.

**Checkpoint** (a JSONL ``.ckpt`` sidecar, a Redis string, the ``record`` column of
PostgreSQL's checkpoints table; SQLite keeps the fields in columns)::

    {"v":1,"version":3,"epoch":"9f86...","covers_to":42,"summarizer":"...",
     "created_at":"2024-...","messages":["<codec record>", ...]}

Also read: Redis's first spelling (``m``, ``to``, ``e``, ``by``, ``at``, ``ver``) and
PostgreSQL's (``summarizer`` and ``messages`` only, the rest in columns; no ``v`` before the
format had one). A store that keeps fields in columns passes them to :func:`decode_checkpoint`
and they win over the payload's. A checkpoint is derived data: one that does not decode is
a :class:`~storage.errors.CorruptRecordError` the store counts and ignores (``store.derived``).

**Record** (an application record; its ``seq`` lives in the store's own field)::

    {"id":"...","kind":"tool_approval","at":"2024-...","data":{...}}

The JSONL store splices it into its record line (``{"seq":N,"rec":1,"id":...}``), PostgreSQL
keeps it in a column; Redis writes its own shorter names (``k`` for ``kind``, ``d`` for
``data``), unchanged so that every release reads what another wrote. :func:`decode_record`
reads each spelling.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.codec import decode, encode
from storage.errors import CorruptRecordError, SchemaVersionError
from storage.message import thaw

__all__ = [
    "REDIS_RECORD",
    "RecordNames",
    "decode_checkpoint",
    "decode_record",
    "dumps",
    "encode_checkpoint",
    "encode_record",
    "record_fields",
]

CHECKPOINT_FORMAT: Final = 1

#: Compact JSON, non-ASCII kept as is (the codec's convention); NaN and infinities refused.
dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode

# Each checkpoint field: the key written, then the other keys it was written under.
_CHECKPOINT_KEYS: Final = {
    "version": ("version", "ver"),
    "epoch": ("epoch", "e"),
    "covers_to": ("covers_to", "to"),
    "summarizer": ("summarizer", "by"),
    "created_at": ("created_at", "at"),
    "messages": ("messages", "m"),
}
_UNREADABLE: Final = (
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    RecursionError,
    CorruptRecordError,
    SchemaVersionError,
)


def encode_checkpoint(checkpoint: SummaryCheckpoint) -> str:
    """A checkpoint (``version`` already the one it is stored as) as one line of JSON."""
    return dumps(
        {
            "v": CHECKPOINT_FORMAT,
            "version": checkpoint.version,
            "epoch": checkpoint.epoch,
            "covers_to": checkpoint.covers_to,
            "summarizer": checkpoint.summarizer,
            "created_at": checkpoint.created_at.isoformat(),
            "messages": [encode(m) for m in checkpoint.messages],
        }
    )


def _field(data: Mapping[str, Any], name: str, columns: Mapping[str, object]) -> Any:
    if name in columns:
        return columns[name]
    for key in _CHECKPOINT_KEYS[name]:
        if key in data:
            return data[key]
    raise KeyError(name)


def decode_checkpoint(raw: str | bytes, **columns: object) -> SummaryCheckpoint:
    """The checkpoint of a payload in any spelling; ``columns`` (``version``, ``epoch``,
    ``covers_to``, ``created_at``) are fields the store keeps outside it, and win.

    Raises:
        CorruptRecordError: not a checkpoint a chatlayers store wrote (bad JSON, the wrong
            shape or field types, a message that does not decode, another format version).
    """
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise TypeError("not a JSON object")
        if data.get("v", CHECKPOINT_FORMAT) != CHECKPOINT_FORMAT:
            raise ValueError(f"unknown checkpoint format {data.get('v')!r}")
        version = _field(data, "version", columns)
        covers_to = _field(data, "covers_to", columns)
        epoch = _field(data, "epoch", columns)
        summarizer = _field(data, "summarizer", columns)
        created_at = _field(data, "created_at", columns)
        messages = _field(data, "messages", columns)
        if isinstance(created_at, str):
            created_at = datetime.fromisoformat(created_at)
        if not (
            type(version) is int
            and type(covers_to) is int
            and isinstance(epoch, str)
            and isinstance(summarizer, str)
            and isinstance(created_at, datetime)
            and isinstance(messages, list)
        ):
            raise TypeError("bad field types")
        return SummaryCheckpoint(
            tuple([decode(text) for text in messages]),
            covers_to,
            epoch,
            summarizer,
            created_at,
            version,
        )
    except _UNREADABLE as exc:
        snippet = raw[:80]
        raise CorruptRecordError(f"cannot decode stored checkpoint {snippet!r}: {exc!r}") from exc


class RecordNames:
    """The JSON keys a store writes a record's ``kind`` and ``data`` under."""

    __slots__ = ("data", "kind")

    def __init__(self, kind: str, data: str) -> None:
        self.kind = kind
        self.data = data


_RECORD: Final = RecordNames("kind", "data")
#: Redis's spelling of records (``k``, ``d``), kept so every release reads them.
REDIS_RECORD: Final = RecordNames("k", "d")


def record_fields(record: ConversationRecord, names: RecordNames = _RECORD) -> str:
    """The members of a record's JSON object, without the braces (``created_at`` set):
    ``"id":...,"kind":...,"at":"...","data":{...}``.

    Raises:
        TypeError, ValueError: ``data`` is not JSON data (checked before: never for a
            record ``storage.stores.checks.check_record`` passed).
    """
    assert record.created_at is not None
    return (
        f'"id":{dumps(record.id)},"{names.kind}":{dumps(record.kind)},'
        f'"at":"{record.created_at.isoformat()}","{names.data}":{dumps(thaw(record.data))}'
    )


def encode_record(record: ConversationRecord, names: RecordNames = _RECORD) -> str:
    """A record (``created_at`` set) as one JSON object (:func:`record_fields`)."""
    return "{" + record_fields(record, names) + "}"


def decode_record(
    raw: str | bytes | Mapping[str, Any], seq: int, created_at: datetime | None = None
) -> ConversationRecord:
    """The record of a payload in any spelling (or of its parsed JSON object); ``seq`` and
    ``created_at`` (when the store keeps it in a column) come from the store.

    Raises:
        CorruptRecordError: not a record a chatlayers store wrote.
    """
    try:
        data = raw if isinstance(raw, Mapping) else json.loads(raw)
        kind = data["kind"] if "kind" in data else data["k"]
        value = data["data"] if "data" in data else data["d"]
        record_id = data["id"]
        at = created_at if created_at is not None else datetime.fromisoformat(data["at"])
        if not (isinstance(kind, str) and isinstance(record_id, str) and isinstance(value, dict)):
            raise TypeError("bad field types")
        return ConversationRecord(kind, value, record_id, at, seq)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        snippet = raw if isinstance(raw, Mapping) else raw[:80]
        raise CorruptRecordError(f"cannot decode stored record {snippet!r}: {exc!r}") from exc

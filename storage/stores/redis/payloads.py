"""JSON of what the Redis store keeps beside messages: summary checkpoints and records."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.codec import decode, encode
from storage.errors import CorruptRecordError, SchemaVersionError
from storage.message import ChatMessage, thaw

__all__ = ["decode_checkpoint", "decode_record", "encode_checkpoint", "encode_record"]

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def encode_checkpoint(checkpoint: SummaryCheckpoint) -> str:
    """A checkpoint (its ``version`` already the one it is stored as) as one JSON text."""
    return _dumps(
        {
            "v": 1,
            "m": [encode(m) for m in checkpoint.messages],
            "to": checkpoint.covers_to,
            "e": checkpoint.epoch,
            "by": checkpoint.summarizer,
            "at": checkpoint.created_at.isoformat(),
            "ver": checkpoint.version,
        }
    )


def decode_checkpoint(raw: bytes) -> SummaryCheckpoint:
    """Raises: CorruptRecordError: not a checkpoint this store wrote (bad JSON, the wrong
    shape, a message that does not decode, another format version)."""
    try:
        data = json.loads(raw)
        if data.get("v") != 1:
            raise ValueError(f"unknown checkpoint format {data.get('v')!r}")
        covers_to, version = data["to"], data["ver"]
        if type(covers_to) is not int or type(version) is not int:
            raise TypeError("bad field types")
        messages: tuple[ChatMessage, ...] = tuple([decode(m) for m in data["m"]])
        return SummaryCheckpoint(
            messages=messages,
            covers_to=covers_to,
            epoch=str(data["e"]),
            summarizer=str(data["by"]),
            created_at=datetime.fromisoformat(data["at"]),
            version=version,
        )
    except (
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        RecursionError,
        CorruptRecordError,
        SchemaVersionError,
    ) as exc:
        raise CorruptRecordError(f"cannot decode stored checkpoint {raw[:80]!r}: {exc!r}") from exc


def encode_record(record: ConversationRecord) -> str:
    """A record (``created_at`` set) as one JSON text; its ``seq`` is kept by the entry."""
    assert record.created_at is not None
    data: Any = thaw(record.data)
    return _dumps(
        {"id": record.id, "k": record.kind, "d": data, "at": record.created_at.isoformat()}
    )


def decode_record(seq: int, raw: bytes) -> ConversationRecord:
    """Raises: CorruptRecordError: not a record this store wrote."""
    try:
        data = json.loads(raw)
        return ConversationRecord(
            kind=data["k"],
            data=data["d"],
            id=data["id"],
            created_at=datetime.fromisoformat(data["at"]),
            seq=seq,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptRecordError(f"cannot decode stored record {raw[:80]!r}: {exc!r}") from exc

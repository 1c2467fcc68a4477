"""The record codec shared by every persistent store: one JSON object per message.

Record, version 1 (compact JSON, UTF-8, non-ASCII kept as is)::

    {"v": 1, "id": "<message id>", "at": "<ISO 8601 UTC>", "m": {<OpenAI message>},
     "md": {<metadata>}, "p": ["content", ...]}

``md`` is omitted when empty. ``p`` (the OpenAI fields the source dict had) is omitted when
the message was built in code. Stores put the sequence and key in their own columns or paths.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Final

from storage.errors import CorruptRecordError
from storage.message import _NAMED_FIELDS, ChatMessage, ToolCall, thaw

__all__ = ["FORMAT_VERSION", "decode", "encode"]

FORMAT_VERSION: Final = 1

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_loads = json.loads
_fromiso = datetime.fromisoformat
# Interned "present" sets: a handful of distinct key sets cover every real message.
_PRESENT: dict[tuple[str, ...], frozenset[str]] = {}


def encode(message: ChatMessage) -> str:
    """The record of a validated message whose ``created_at`` is set (one line, no newline)."""
    assert message.created_at is not None
    record: dict[str, Any] = {
        "v": FORMAT_VERSION,
        "id": message.id,
        "at": message.created_at.isoformat(),
        "m": message.to_openai(),
    }
    if message.metadata:
        record["md"] = thaw(message.metadata)
    if message.present is not None:
        record["p"] = sorted(message.present)
    return _dumps(record)


def decode(text: str | bytes) -> ChatMessage:
    """Rebuild the message from its record.

    Raises:
        CorruptRecordError: the record is not valid JSON or lacks a required field.
    """
    try:
        record = _loads(text)
        m = record["m"]
        p = record.get("p")
        present = None
        if p is not None:
            t = tuple(p)
            present = _PRESENT.get(t)
            if present is None:
                present = _PRESENT.setdefault(t, frozenset(t))
        calls = m.get("tool_calls")
        extra = None
        if not _NAMED_FIELDS.issuperset(m):
            extra = {k: v for k, v in m.items() if k not in _NAMED_FIELDS}
        return ChatMessage(
            m["role"],
            m.get("content"),
            tuple(ToolCall.from_openai(c) for c in calls) if calls else (),
            m.get("tool_call_id"),
            m.get("name"),
            record["id"],
            _fromiso(record["at"]),
            record.get("md") or None,
            extra or None,
            present,
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        snippet = text[:80] if isinstance(text, str) else text[:80].decode("utf-8", "replace")
        raise CorruptRecordError(f"cannot decode stored record {snippet!r}: {exc!r}") from exc

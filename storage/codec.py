"""The record codec shared by every persistent store: one JSON object per message.

Record, version 1 (compact JSON, UTF-8, non-ASCII kept as is)::

    {"v": 1, "id": "<message id>", "at": "<ISO 8601 UTC>", "m": {<OpenAI message>},
     "md": {<metadata>}, "p": ["content", ...]}

``md`` is omitted when empty. ``p`` (the OpenAI fields the source dict had) is omitted when
the message was built in code. Stores put the sequence and key in their own columns or paths.
"""

from __future__ import annotations

import json
import json.encoder
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Final

from storage.errors import CorruptRecordError, SchemaVersionError
from storage.message import (
    EMPTY_MAPPING,
    NAMED_FIELDS,
    ChatMessage,
    ToolCall,
    freeze_content,
    freeze_mapping,
    thaw,
    trusted_message,
    trusted_tool_call,
)

__all__ = ["FORMAT_VERSION", "DecodeCache", "check_format_version", "decode", "encode"]

FORMAT_VERSION: Final = 1

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_loads = json.loads
_fromiso = datetime.fromisoformat
# Interned "present" sets: a handful of distinct key sets cover every real message.
_PRESENT: dict[tuple[str, ...], frozenset[str]] = {}
# And their JSON text for encoding.
_PRESENT_JSON: dict[frozenset[str], str] = {}
_HEAD: Final = f'{{"v":{FORMAT_VERSION},"id":'
_quote = json.encoder.encode_basestring  # the C function JSONEncoder(ensure_ascii=False) uses


_last_at: tuple[datetime | None, str] = (None, "")


def _remember_at(at: datetime, iso: str) -> None:
    global _last_at
    _last_at = (at, iso)  # one tuple: readers on other threads see a matching pair


def encode(message: ChatMessage) -> str:
    """The record of a validated message whose ``created_at`` is set (one line, no newline)."""
    at = message.created_at
    assert at is not None
    last = _last_at
    if last[0] is at:  # a batch shares one timestamp; isoformat costs ~1 µs
        iso = last[1]
    else:
        iso = at.isoformat()
        _remember_at(at, iso)
    # Assembled by hand: the same text as dumping the record dict (same keys, order and
    # separators), but only the OpenAI message goes through the encoder (~2 µs less a message).
    parts = [
        _HEAD,
        _quote(message.id),
        ',"at":"',
        iso,  # digits, '-', ':', '.', '+': nothing to escape
        '","m":',
        _dumps(message.to_openai()),
    ]
    if message.metadata:
        parts += [',"md":', _dumps(thaw(message.metadata))]
    present = message.present
    if present is not None:
        p = _PRESENT_JSON.get(present)
        if p is None:
            p = _dumps(sorted(present))
            if len(_PRESENT_JSON) < 64:  # subsets of the five named fields: 32 at most
                _PRESENT_JSON[present] = p
        parts += [',"p":', p]
    parts.append("}")
    return "".join(parts)


def decode(text: str | bytes) -> ChatMessage:
    """Rebuild the message from its record.

    Raises:
        CorruptRecordError: the record is not valid JSON, lacks a required field, or nests
            too deeply to decode.
        SchemaVersionError: the record was written in a newer format version (by a newer
            chatlayers): never misread as this version.
    """
    try:
        record = _loads(text)
        v = record.get("v")
        if v != FORMAT_VERSION:
            check_format_version(v, "a stored record")
        m = record["m"]
        p = record.get("p")
        present = None
        if p is not None:
            t = tuple(p)
            present = _PRESENT.get(t)
            if present is None:
                present = _PRESENT.setdefault(t, frozenset(t))
        content = m.get("content")
        if content is not None and content.__class__ is not str:
            content = freeze_content(content)
        calls = m.get("tool_calls")
        tool_calls: tuple[ToolCall, ...] = ()
        if calls:
            tool_calls = tuple([_tool_call(c) for c in calls])
        extra = EMPTY_MAPPING
        if not NAMED_FIELDS.issuperset(m):
            extra = freeze_mapping({k: v for k, v in m.items() if k not in NAMED_FIELDS})
        md = record.get("md")
        # The same values ChatMessage's converters would store, built without them (hot path).
        return trusted_message(
            m["role"],
            content,
            tool_calls,
            m.get("tool_call_id"),
            m.get("name"),
            record["id"],
            _fromiso(record["at"]),
            freeze_mapping(md) if md else EMPTY_MAPPING,
            extra,
            present,
        )
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        # RecursionError: a record nested far deeper than validation allows (written by
        # something else); everything chatlayers writes decodes within MAX_DEPTH levels.
        snippet = text[:80] if isinstance(text, str) else text[:80].decode("utf-8", "replace")
        raise CorruptRecordError(f"cannot decode stored record {snippet!r}: {exc!r}") from exc


def check_format_version(version: object, what: str) -> None:
    """Refuse what a newer chatlayers wrote: ``version`` is the format version found.

    Raises:
        SchemaVersionError: ``version`` is an int above :data:`FORMAT_VERSION`.
    """
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise SchemaVersionError(
            f"{what} has format version {version}, newer than version {FORMAT_VERSION}, the "
            "newest this chatlayers knows: upgrade chatlayers to read it (nothing was written)"
        )


def _tool_call(data: dict[str, Any]) -> ToolCall:
    function = data["function"]
    return trusted_tool_call(
        data["id"], function["name"], function["arguments"], data.get("type", "function")
    )


class DecodeCache:
    """Decoded messages by a store's record sequence number, bounded by record size.

    For stores whose records are never rewritten and whose sequence numbers are never reused
    (SQLite ``AUTOINCREMENT``, PostgreSQL ``bigserial``): the message decoded from sequence
    ``n`` is the same forever, and messages are immutable, so a decoded one can be returned
    again without reading its record. ``json.loads`` plus building the message is about 90 %
    of a whole-history read; a cached read only needs the sequence numbers (an index-only
    scan in SQLite). Entries leave first in, first out once the cached records' text exceeds
    ``max_chars``; one read may fill at most half of the budget (its newest messages), so a
    history larger than the cache cannot flush it on every read.

    Args:
        max_chars: budget in characters of record text (decoded messages take roughly one to
            two times that in memory); 0 disables caching.
    """

    __slots__ = ("_chars", "_sizes", "max_chars", "messages")

    def __init__(self, max_chars: int) -> None:
        if max_chars < 0:
            raise ValueError(f"max_chars must be >= 0, got {max_chars}")
        self.max_chars = max_chars
        self.messages: OrderedDict[int, ChatMessage] = OrderedDict()
        self._sizes: dict[int, int] = {}
        self._chars = 0

    def __len__(self) -> int:
        return len(self.messages)

    def decode_rows(self, rows: Iterable[tuple[int, str | bytes | None]]) -> list[ChatMessage]:
        """Messages of ``(seq, record)`` rows in order, decoding only the uncached ones.

        A row whose record is ``None`` must be cached (the caller knew it was).

        Raises:
            CorruptRecordError: an uncached record cannot be decoded.
            KeyError: a ``None`` record whose sequence is not cached.
        """
        cached = self.messages
        out: list[ChatMessage] = []
        new: list[tuple[int, ChatMessage, int]] = []
        for seq, record in rows:
            message = cached.get(seq)
            if message is None:
                if record is None:
                    raise KeyError(seq)
                message = decode(record)
                new.append((seq, message, len(record)))
            out.append(message)
        if new and self.max_chars:
            self._add(new)
        return out

    def _add(self, new: list[tuple[int, ChatMessage, int]]) -> None:
        room = self.max_chars // 2
        start = len(new)
        used = 0
        while start > 0 and used + new[start - 1][2] <= room:
            start -= 1
            used += new[start][2]
        cached, sizes = self.messages, self._sizes
        for seq, message, size in new[start:]:
            cached[seq] = message
            sizes[seq] = size
        self._chars += used
        while self._chars > self.max_chars:
            seq, _ = cached.popitem(last=False)
            self._chars -= sizes.pop(seq)

    def discard(self, seqs: Iterable[int]) -> None:
        """Forget these sequence numbers (their records were deleted)."""
        cached, sizes = self.messages, self._sizes
        for seq in seqs:
            if cached.pop(seq, None) is not None:
                self._chars -= sizes.pop(seq)

    def clear(self) -> None:
        """Forget everything."""
        self.messages.clear()
        self._sizes.clear()
        self._chars = 0

"""Search for stores without a search engine: a scan with BM25-like scoring, and snippets.

Stores with an engine (SQLite FTS5, PostgreSQL ``tsvector``) index
:func:`message_search_text` and use :func:`make_snippet`; the others (memory, JSONL, Redis)
scan one user's messages with :func:`scan_search`. Every store checks its arguments with
:func:`check_search_args`, so ``search`` refuses the same inputs everywhere.

Matching is on words, case- and accent-insensitive (``Café`` matches ``cafe``); a message
matches when it holds at least one query word, and messages holding more of the rarer words
score higher (BM25, ``k1=1.2``, ``b=0.75``). Ties go to the newer message.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from storage.abilities import SearchHit
from storage.errors import InvalidArgumentError
from storage.message import ChatKey, ChatMessage

__all__ = [
    "SNIPPET_CHARS",
    "check_search_args",
    "make_snippet",
    "message_search_text",
    "normalize_word",
    "scan_search",
    "tokenize",
]

SNIPPET_CHARS: Final = 160
_WORD: Final = re.compile(r"\w+")
_K1: Final = 1.2
_B: Final = 0.75
# Content-part fields that carry text a person wrote or read (never base64 payloads).
_TEXT_FIELDS: Final = ("text", "refusal", "transcript", "input_text", "output_text")
_OLDEST: Final = datetime.min.replace(tzinfo=UTC)


def check_search_args(query: object, limit: object) -> list[str]:
    """The query's words, after checking ``search``'s arguments.

    Raises:
        InvalidArgumentError: ``query`` is not a string or holds no word; ``limit`` is not an
            int >= 1.
    """
    if type(limit) is not int or limit < 1:
        raise InvalidArgumentError(f"search limit must be an int >= 1, got {limit!r}")
    if not isinstance(query, str):
        raise InvalidArgumentError(f"search query must be a str, got {type(query).__name__}")
    terms = list(dict.fromkeys(tokenize(query)))
    if not terms:
        raise InvalidArgumentError(f"search query {query!r} holds no word to search for")
    return terms


def normalize_word(word: str) -> str:
    """``word`` case-folded, without accents (``Ça`` → ``ca``)."""
    decomposed = unicodedata.normalize("NFKD", word)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def tokenize(text: str) -> list[str]:
    """The normalized words of ``text``, in order (:func:`normalize_word`)."""
    text = unicodedata.normalize("NFC", text)
    return [w for w in (normalize_word(m.group()) for m in _WORD.finditer(text)) if w]


def message_search_text(message: ChatMessage) -> str:
    """The searchable text of a message: content text and text parts, tool-call names and
    arguments, a tool result, an audio transcript; one string, pieces on separate lines."""
    pieces: list[str] = []
    content = message.content
    if isinstance(content, str):
        pieces.append(content)
    elif content:
        for part in content:
            if isinstance(part, Mapping):
                _part_text(part, pieces, 0)
    for call in message.tool_calls:
        pieces.append(call.name)
        pieces.append(call.arguments)
    audio = message.extra.get("audio")
    if isinstance(audio, Mapping) and isinstance(audio.get("transcript"), str):
        pieces.append(audio["transcript"])
    return "\n".join(p for p in pieces if p)


def _part_text(part: Mapping[str, Any], pieces: list[str], depth: int) -> None:
    if depth > 8:  # parts nest shallowly; validation bounds the rest
        return
    for name in _TEXT_FIELDS:
        value = part.get(name)
        if isinstance(value, str):
            pieces.append(value)
    for value in part.values():
        if isinstance(value, Mapping):
            _part_text(value, pieces, depth + 1)
        elif isinstance(value, tuple | list):
            for item in value:
                if isinstance(item, Mapping):
                    _part_text(item, pieces, depth + 1)


def make_snippet(text: str, terms: Collection[str], *, width: int = SNIPPET_CHARS) -> str:
    """About ``width`` characters of ``text`` around its first word in ``terms`` (normalized
    words), with ``…`` where text was cut; the start of ``text`` when no word matches.
    Whitespace runs become one space."""
    text = " ".join(unicodedata.normalize("NFC", text).split())
    if len(text) <= width:
        return text
    wanted = set(terms)
    start = 0
    for match in _WORD.finditer(text):
        if normalize_word(match.group()) in wanted:
            # Some context before the match, most of the room after it.
            start = max(0, min(match.start() - width // 4, len(text) - width))
            break
    end = min(len(text), start + width)
    if start > 0:
        space = text.find(" ", start, start + 20)
        if space != -1:
            start = space + 1
    if end < len(text):
        space = text.rfind(" ", end - 20, end)
        if space > start:
            end = space
    return ("…" if start > 0 else "") + text[start:end] + ("…" if end < len(text) else "")


def scan_search(
    query: str, items: Iterable[tuple[ChatKey, ChatMessage]], *, limit: int
) -> list[SearchHit]:
    """Score every message of ``items`` against ``query``; the best ``limit``, best first.

    Args:
        query: the words to find (at least one).
        items: the messages to search (one user's, whatever order; ties go to the newer
            ``created_at``, then to the later item).
        limit: at most this many hits (>= 1).

    Raises:
        InvalidArgumentError: see :func:`check_search_args`.
    """
    terms = check_search_args(query, limit)
    wanted = set(terms)
    docs: list[tuple[int, ChatKey, ChatMessage, Counter[str], int]] = []
    df: Counter[str] = Counter()
    total_len = 0
    count = 0
    for position, (key, message) in enumerate(items):
        words = tokenize(message_search_text(message))
        count += 1
        total_len += len(words)
        counts = Counter(w for w in words if w in wanted)
        if counts:
            docs.append((position, key, message, counts, len(words)))
            df.update(counts.keys())
    if not docs:
        return []
    average = total_len / count or 1.0
    idf = {t: math.log(1 + (count - df[t] + 0.5) / (df[t] + 0.5)) for t in df}
    scored: list[tuple[float, datetime, int, ChatKey, ChatMessage]] = []
    for position, key, message, counts, length in docs:
        norm = _K1 * (1 - _B + _B * length / average)
        score = sum(idf[t] * f * (_K1 + 1) / (f + norm) for t, f in counts.items())
        scored.append((score, message.created_at or _OLDEST, position, key, message))
    scored.sort(key=lambda row: (row[0], row[1], row[2]), reverse=True)
    return [
        SearchHit(key, message, make_snippet(message_search_text(message), wanted), score)
        for score, _, _, key, message in scored[:limit]
    ]

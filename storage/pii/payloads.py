"""Scrub a JSON document value by value, keeping its exact formatting, keys and structure.

Tool-call arguments and tool results are usually JSON. Re-serialising them would change
their bytes (spacing, key order, escapes) even where nothing was found, so the document is
edited in place instead: once ``json.loads`` has accepted it, a linear scan visits its
string literals and numbers (outside strings no ``"`` can occur, so the scan cannot lose
sync), skips object keys, and replaces only the values whose text changed. A whole integer
that is PII (a card number stored as a number) becomes a JSON string holding the
placeholder. The result always parses with ``json.loads``. Most documents hold no
backslash and no long integer: they are split at their quotes (``str.split``, in C) rather
than scanned token by token, with the same result.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Final

from storage.pii.prefilter import plain_word

__all__ = ["scrub_json"]

_BODY: Final = r'((?:[^"\\]++|\\.)*+)"'  # a string literal after its opening quote
_NUMBER_REST: Final = r"(?:\.\d++)?(?:[eE][+-]?\d++)?"
# A string (group 1: its text) with, when it is an object key, the colon (group 2) and a
# string or number value right after it (groups 3, 4; an object, array, true, false or null
# is left to the next match); or a number elsewhere (the whole match). Every match starts
# with one of '"', '-' or a digit, which lets the engine skip fast to the next token.
_DIGITS_AS_0: Final = bytes.maketrans(b"123456789", b"000000000")
# A number at the start of a text.
_NUMBER_AT_RE: Final = re.compile(rf"-?\d++{_NUMBER_REST}")
_TOKEN_RE: Final = re.compile(
    rf'["\-\d](?:(?<="){_BODY}(\s*+:\s*+(?:"{_BODY}|(-?\d++{_NUMBER_REST}))?)?'
    rf"|(?<=-)\d++{_NUMBER_REST}|(?<=\d)\d*+{_NUMBER_REST})"
)


def scrub_json(
    raw: str,
    scrub_string: Callable[[str], str],
    scrub_integer: Callable[[str], str | None],
    scrub_keyed: Callable[[str, str], str | None] | None = None,
    key_entities: Mapping[str, str | None] | None = None,
    *,
    words_unchanged: bool = False,
) -> str | None:
    """Scrub the JSON document ``raw``; ``None`` when ``raw`` is not a JSON object or array.

    Args:
        raw: the document.
        scrub_string: maps a decoded string value to its scrubbed text.
        scrub_integer: maps the digits of a non-negative integer of 7+ digits to replacement
            text when the whole number is PII, else ``None``.
        scrub_keyed: maps (entity, value text) of a string or non-negative integer value that
            directly follows an object key naming that entity (``"zip": "78750"``) to
            replacement text, else ``None``; tried before the other two.
        key_entities: the entity each object key names (``None``: none), by the key's text
            between its quotes as written (:class:`~storage.pii.keyed.KeyEntities`); needed
            by ``scrub_keyed``.
        words_unchanged: ``scrub_string`` leaves a short word
            (:func:`~storage.pii.prefilter.plain_word`: ``"economy"``, ``"ATL"``) as it is,
            so it is not called for one.

    Returns:
        ``raw`` itself when nothing changed, else the edited document.
    """
    head = raw.lstrip()[:1]
    if head not in ("{", "["):
        return None
    try:
        json.loads(raw)
    except (ValueError, RecursionError):  # too deep to parse: scrubbed as plain text
        return None
    if scrub_keyed is None:
        key_entities = None
    if "\\" not in raw:
        parts = raw.split('"')
        # Outside strings valid JSON is ASCII: structure, numbers, true, false, null.
        outside = " ".join(parts[0::2]).encode("ascii").translate(_DIGITS_AS_0)
        if b"0000000" not in outside:
            return _by_quotes(raw, parts, scrub_string, scrub_keyed, key_entities, words_unchanged)
    return _by_tokens(raw, scrub_string, scrub_integer, scrub_keyed, key_entities, words_unchanged)


def _new_body(
    body: str,
    entity: str | None,
    scrub_string: Callable[[str], str],
    scrub_keyed: Callable[[str, str], str | None] | None,
    words_unchanged: bool,
) -> str | None:
    """What replaces ``body``, a string's text between its quotes as written (under a key
    naming ``entity``), also written for between quotes; ``None`` when it stays."""
    text = json.loads(f'"{body}"') if "\\" in body else body
    new = scrub_keyed(entity, text) if entity is not None and scrub_keyed else None
    if new is None:
        if words_unchanged and len(text) < 15 and plain_word(text):
            return None
        new = scrub_string(text)
    if new == text:
        return None
    if new.isascii() and new.isprintable() and '"' not in new and "\\" not in new:
        return new  # nothing to escape (a placeholder): what json.dumps would write
    return json.dumps(new, ensure_ascii=body.isascii())[1:-1]


def _by_quotes(
    raw: str,
    parts: list[str],
    scrub_string: Callable[[str], str],
    scrub_keyed: Callable[[str, str], str | None] | None,
    key_entities: Mapping[str, str | None] | None,
    words_unchanged: bool,
) -> str:
    """:func:`scrub_json` of a document with no backslash and no run of 7 digits outside its
    strings (no integer that could be PII), split at its quotes: ``parts[1::2]`` are the
    strings' texts, the parts between them the structure and numbers. A string followed by
    a colon is a key; a string or number right after that colon is its value."""
    changed = False
    i, size = 1, len(parts)
    while i < size:
        after = parts[i + 1].lstrip()
        if after[:1] != ":":  # a string in an array
            new = _new_body(parts[i], None, scrub_string, scrub_keyed, words_unchanged)
            if new is not None:
                parts[i], changed = new, True
            i += 2
            continue
        entity = key_entities[parts[i]] if key_entities is not None else None
        rest = after[1:].lstrip()
        if not rest:  # its value is the next string
            body = parts[i + 2]
            new = _new_body(body, entity, scrub_string, scrub_keyed, words_unchanged)
            if new is not None:
                parts[i + 2], changed = new, True
            i += 4
            continue
        if entity is not None and scrub_keyed is not None:
            number = _NUMBER_AT_RE.match(rest)
            if number is not None and number.group().isdigit():
                new_number = scrub_keyed(entity, number.group())
                if new_number is not None:
                    segment = parts[i + 1]
                    at = len(segment) - len(rest)
                    parts[i + 1] = (
                        segment[:at] + json.dumps(new_number) + segment[at + number.end() :]
                    )
                    changed = True
        i += 2
    return '"'.join(parts) if changed else raw


def _by_tokens(
    raw: str,
    scrub_string: Callable[[str], str],
    scrub_integer: Callable[[str], str | None],
    scrub_keyed: Callable[[str, str], str | None] | None,
    key_entities: Mapping[str, str | None] | None,
    words_unchanged: bool,
) -> str:
    """:func:`scrub_json` of any document, token by token (:data:`_TOKEN_RE`)."""
    pieces: list[str] = []
    last = 0
    for m in _TOKEN_RE.finditer(raw):
        body, colon, value, number = m.groups()
        entity = None
        if body is None:  # a number in an array
            number, group = m.group(), 0
        elif colon is not None:  # an object key
            if value is None and number is None:
                continue  # its value is an object, an array, true, false or null
            if key_entities is not None:
                entity = key_entities[body]
            group = 3 if value is not None else 4
        else:  # a string in an array
            value, group = body, 1
        if value is not None:
            replacement = _new_body(value, entity, scrub_string, scrub_keyed, words_unchanged)
            if replacement is None:
                continue
            begin, end = m.span(group)
        else:
            assert number is not None
            new_number = None
            if entity is not None and scrub_keyed is not None and number.isdigit():
                new_number = scrub_keyed(entity, number)
            if new_number is None:
                if len(number) < 7 or not number.isdigit():
                    continue
                new_number = scrub_integer(number)
            if new_number is None:
                continue
            replacement = json.dumps(new_number)
            begin, end = m.span(group)
        pieces.append(raw[last:begin])
        pieces.append(replacement)
        last = end
    if not pieces:
        return raw
    pieces.append(raw[last:])
    return "".join(pieces)

"""Scrub a JSON document value by value, keeping its exact formatting, keys and structure.

Tool-call arguments and tool results are usually JSON. Re-serialising them would change
their bytes (spacing, key order, escapes) even where nothing was found, so the document is
edited in place instead: once ``json.loads`` has accepted it, a linear scan visits its
string literals and numbers (outside strings no ``"`` can occur, so the scan cannot lose
sync), skips object keys, and replaces only the values whose text changed. A whole integer
that is PII (a card number stored as a number) becomes a JSON string holding the
placeholder. The result always parses with ``json.loads``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Final

__all__ = ["scrub_json"]

# A string (with the colon after it when it is an object key) or a number.
_TOKEN_RE: Final = re.compile(r'"(?:[^"\\]++|\\.)*+"(\s*+:)?|-?\d++(?:\.\d++)?(?:[eE][+-]?\d++)?')


def scrub_json(
    raw: str,
    scrub_string: Callable[[str], str],
    scrub_integer: Callable[[str], str | None],
    scrub_keyed: Callable[[str, str], str | None] | None = None,
    is_keyed: Callable[[str], bool] | None = None,
) -> str | None:
    """Scrub the JSON document ``raw``; ``None`` when ``raw`` is not a JSON object or array.

    Args:
        raw: the document.
        scrub_string: maps a decoded string value to its scrubbed text.
        scrub_integer: maps the digits of a non-negative integer of 7+ digits to replacement
            text when the whole number is PII, else ``None``.
        scrub_keyed: maps (object key, value text) of a string or non-negative integer value
            that directly follows its key to replacement text when the key names an entity
            (``"zip": "78750"``), else ``None``; tried before the other two.
        is_keyed: whether ``scrub_keyed`` can replace a value under this (decoded) object key;
            default: any key.

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
    loads, dumps = json.loads, json.dumps
    pieces: list[str] = []
    last = 0
    key: str | None = None  # the key whose value comes next
    key_end = 0
    for m in _TOKEN_RE.finditer(raw):
        token = m.group()
        keyed = key if key is not None and not raw[key_end : m.start()].strip() else None
        key = None
        if token[0] == '"':
            if m.start(1) >= 0:  # an object key
                if scrub_keyed is not None:
                    literal = token[: m.start(1) - m.start()]
                    name = loads(literal) if "\\" in literal else literal[1:-1]
                    if is_keyed is None or is_keyed(name):
                        key, key_end = name, m.end()
                continue
            value = loads(token) if "\\" in token else token[1:-1]
            new = scrub_keyed(keyed, value) if keyed is not None and scrub_keyed else None
            if new is None:
                new = scrub_string(value)
            if new == value:
                continue
            replacement = dumps(new, ensure_ascii=token.isascii())
        else:
            new_number = None
            if keyed is not None and scrub_keyed is not None and token.isdigit():
                new_number = scrub_keyed(keyed, token)
            if new_number is None:
                if len(token) < 7 or not token.isdigit():
                    continue
                new_number = scrub_integer(token)
            if new_number is None:
                continue
            replacement = dumps(new_number)
        pieces.append(raw[last : m.start()])
        pieces.append(replacement)
        last = m.end()
    if not pieces:
        return raw
    pieces.append(raw[last:])
    return "".join(pieces)

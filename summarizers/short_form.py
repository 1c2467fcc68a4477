"""The short form of a ledger entry: its facts, nothing the rest of the summary says.

Used when a summary runs out of room (:meth:`summarizers.notes.Notes.bound`) and for the
options a list of results offered: an entry keeps every identifier, amount, date and
``A→B`` pair it states, and the short plain values at its top (``status=cancelled``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from summarizers.facts import has_fact
from summarizers.ledger import NAMED_PART, split_parts

__all__ = ["facts_only"]


def facts_only(text: str, elsewhere: str = "", records: Mapping[str, str] | None = None) -> str:
    """The short form of an entry's text: the parts that hold a fact (an id, an amount, a
    date) or an ``A→B`` pair, at any depth, and the short plain values at the top
    (``status=cancelled``); quoted text without a fact goes, a history left with only its
    moments goes (when, not what happened), a top-level value that ``elsewhere`` (the newer
    entries) also holds goes (an owner's id or address repeated in every order), and so do
    the parts of a nested record that its own entry states (``records``: identity → entry
    text; ``orders=[(ORD-1, placed_on=2024-03-02, total=$228)]`` keeps ``placed_on`` when
    ``order ORD-1`` says ``total=$228``). The text itself when nothing would be left, or
    when it states no fact at all."""
    if not has_fact(text):
        return text
    kept = []
    for part in split_parts(text, ", "):
        short = _short_part(part, records or {}, top=True)
        value = short.partition("=")[2] or short
        if short and not (elsewhere and _repeated(value, elsewhere)) and not _dated(short, text):
            kept.append(short)
    return ", ".join(kept) if kept else text


def _dated(part: str, text: str) -> bool:
    """Whether ``part`` is a status the record also dates (``status=delivered`` in a record
    with ``delivered_on=2024-03-08``, at any depth): the date says it, and when."""
    name, _, value = part.partition("=")
    if name != "status" or not value.isidentifier():
        return False
    return re.search(rf"(?<![\w-]){value}_(?:on|at|date)=", text) is not None


def _repeated(value: str, elsewhere: str) -> bool:
    """Whether ``value`` is an identity, address or other fact ``elsewhere`` states too (an
    owner's id in every order). A plain word is this record's own, whoever else has it:
    another reservation in ``basic_economy`` does not make this one's cabin a repeat."""
    return len(value) >= _REPEATED and has_fact(value) and _holds(elsewhere, value)


def _holds(text: str, value: str) -> bool:
    """Whether ``value`` is in ``text`` as a whole value, not inside a word or key
    (``delivered`` is not in ``delivered_on=2024-03-02``)."""
    return re.search(rf"(?<![\w-]){re.escape(value)}(?![\w-])", text) is not None


_SHORT_PLAIN: Final = 24
_REPEATED: Final = 8  # characters a value needs before it counts as repeated
_STAMP: Final = re.compile(r"^\(?(?:[\w.-]+=)?\d{4}-\d{2}-\d{2}[T ][\d:]+\)?$")


def _short_part(part: str, records: Mapping[str, str], *, top: bool = False) -> str:
    match = NAMED_PART.match(part)
    name, value = (match.group(1), match.group(2)) if match else (None, part)
    short = _short_value(value, records)
    plain = len(value) <= _SHORT_PLAIN and value[:1] not in '"(['
    # Kept when short: a plain value at the top (status=cancelled), an unnamed one inside
    # (a passenger's name: what the record refers to).
    if not short and plain and (name is None or top):
        short = value
    if not short:
        return ""
    return f"{name}={short}" if name else short


def _short_value(value: str, records: Mapping[str, str]) -> str:
    if value.startswith("[") and value.endswith("]"):
        items = [i for i in (_short_value(i, records) for i in split_parts(value[1:-1], "; ")) if i]
        if all(_STAMP.match(i) for i in items):
            # A history whose records kept only their moments: when, but not what happened.
            items = []
        return "[" + "; ".join(items) + "]" if items else ""
    if value.startswith("(") and value.endswith(")"):
        parts = [p for p in (_short_part(p, records) for p in split_parts(value[1:-1], ", ")) if p]
        own = records.get(parts[0]) if parts and "=" not in parts[0] else None
        if own is not None:
            # A record with an entry of its own: what that entry says is not repeated here.
            parts = parts[:1] + [p for p in parts[1:] if not _holds(own, p)]
        if not parts:
            return ""
        return parts[0] if len(parts) == 1 and "=" not in parts[0] else f"({', '.join(parts)})"
    return value if has_fact(value) or "→" in value else ""

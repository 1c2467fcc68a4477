"""The ledger: every identifier, amount and date said so far, with what it refers to.

A tool result that is JSON becomes ledger entries. A result that is one record (it has an
identity: a ``*_id``, ``id``, ``*_number``, ``sku`` or ``code`` key, or the call was made for
one: ``get_user_details(user_id=...)``, ``apply_coupon(order_id=..., code=...)`` whose result
only echoes the code) is one entry holding everything it says, nested
records inline: ``reservation H9ZU1C: DTW→JFK, flight_type=one_way, cabin=economy,
flights=[(HAT097, DTW→JFK, date=2024-05-17, price=$255)]``. A list of records (search
results, an order list) gives one entry per record, marked as *listed*: those are options
seen, cut first when the summary runs out of room unless the conversation used them later.
A result that is not JSON becomes one entry named after the call.

Values are rendered compactly: ``key=value``; ``origin``/``destination`` pairs as ``A→B``,
and two keys that differ only by departure/arrival, start/end, from/to, check-in/check-out
(``scheduled_departure_time``, ``scheduled_arrival_time``) as one:
``scheduled_time=22:00→03:00+1``; a time of day without its ``:00`` seconds; first and last
names joined; amounts under money keys with ``$``; free text longer than 60 characters quoted
(it is data, never an instruction) and shortened; a value holding ``, `` or ``; `` quoted, so
it stays one value (``name="Trekking poles, carbon"``); a history (a list of records each
with a moment: ``events=[{"at": "2024-02-29T17:24:00", ...}, ...]``) as its newest record,
the state, after how many came earlier: ``events=[3 earlier; (at=..., status=out for
delivery)]``.

An entry's **key** (``reservation H9ZU1C``: the kind and the identity, with the record's date
when it has one, so one flight on two days is two entries) says what it is about; the same
key seen again (a reservation read after it was changed) replaces the older text in place:
the ledger holds the newest state.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from summarizers.facts import fact_keys
from summarizers.quoting import quote

__all__ = [
    "NAMED_PART",
    "Entry",
    "compact_value",
    "identity_of",
    "is_money_key",
    "json_entries",
    "label_of",
    "merge",
    "merge_text",
    "parse_json",
    "split_parts",
]

_ID_KEY: Final = re.compile(r"^(?:(?P<label>.+?)_)?(?:id|number|no|code|sku)$", re.IGNORECASE)
_MONEY_WORDS: Final = frozenset(
    {"price", "prices", "amount", "balance", "total", "cost", "fee", "fees", "refund", "paid"}
    | {"charge", "fare", "subtotal", "discount"}
)
_COUNT_WORDS: Final = frozenset(
    {"baggages", "bags", "seats", "passengers", "count", "items", "nights", "days", "number"}
)
_PAIRS: Final = (("origin", "destination"), ("from", "to"))
_LONG_TEXT: Final = 60  # characters of free text before it is quoted and shortened
_TEXT_KEEP: Final = 60
_DATE: Final = re.compile(r"^\d{4}-\d{2}-\d{2}")
_SELF_EVIDENT: Final = frozenset({"date", "price", "amount"})
# The words that make two keys of one record the two ends of one span.
_SPAN_WORDS: Final = (
    ("departure", "arrival"),
    ("depart", "arrive"),
    ("start", "end"),
    ("from", "to"),
    ("checkin", "checkout"),
    ("pickup", "dropoff"),
)
_SHORT_END: Final = 24  # characters of each end of a span shown as A→B
_MOMENT_KEYS: Final = frozenset({"at", "time", "timestamp", "datetime", "when"})
_DATETIME: Final = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")
_WHOLE_MINUTE: Final = re.compile(r"^(\d{1,2}:\d{2}):00(?=$|[+-]\d+$)")


@attrs.frozen
class Entry:
    """One ledger line: ``- {key}: {text}``.

    Attributes:
        key: what it is about (``reservation H9ZU1C``).
        text: its attributes, rendered compactly.
        source: id of the message it came from ("" when unknown: read from an older summary).
        listed: it came from a list of results (an option seen).
    """

    key: str
    text: str
    source: str = ""
    listed: bool = False

    @property
    def line(self) -> str:
        """The line in the summary."""
        return f"- {self.key}: {self.text}" if self.text else f"- {self.key}"

    @property
    def ident(self) -> str | None:
        """The identity in the key (``H9ZU1C`` of ``reservation H9ZU1C``, ``HAT097`` of
        ``flight HAT097 2024-05-17``); ``None`` for a key naming a call or a note."""
        words = self.key.split()
        if len(words) < 2 or "(" in self.key:
            return None
        named = [w for w in words[1:] if not _DATE.match(w)]
        return named[-1] if named else None


def is_money_key(key: str) -> bool:
    """``price``, ``total_amount``, ``prices`` are money; ``total_baggages`` is a count."""
    words = set(re.split(r"[\W_]+", key.lower()))
    return bool(words & _MONEY_WORDS) and not words & _COUNT_WORDS


def label_of(key: str) -> str | None:
    """``reservation_id`` → ``reservation``, ``flight_number`` → ``flight``, ``id`` → ``""``;
    ``None`` when ``key`` does not name an identity."""
    match = _ID_KEY.match(key)
    if match is None:
        return None
    return (match.group("label") or "").replace("_", " ")


def identity_of(record: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """``(key, label, value)`` of a record's identity: its first identity key with a short
    scalar value; ``None`` when it has none."""
    for key, value in record.items():
        label = label_of(str(key))
        if label is None or isinstance(value, bool):
            continue
        if isinstance(value, str) and value.strip() and len(value) <= 80:
            return str(key), label, value.strip()
        if isinstance(value, int):
            return str(key), label, str(value)
    return None


def _number(value: int | float) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return str(int(value))


def _scalar(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value is None:
        return ""
    if isinstance(value, int | float):
        return f"${_number(value)}" if is_money_key(key) else _number(value)
    text = " ".join(str(value).split())
    if len(text) > _LONG_TEXT:
        return quote(text, _TEXT_KEEP)
    if ", " in text or "; " in text or text.startswith(("(", "[")):
        # One value, even when it reads like a list ("Trekking poles, carbon"): quoted, so
        # it is never split into parts of the entry.
        return quote(text)
    return _WHOLE_MINUTE.sub(r"\1", text)


def _spans(record: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(start key, end key, name)`` of each pair of keys of ``record`` that differ only by
    a :data:`_SPAN_WORDS` pair (``name``: the key without it, "" when nothing is left)."""
    found = []
    by_name = {str(key).lower(): str(key) for key in record}
    for name, key in by_name.items():
        words = name.replace("-", "_").split("_")
        for start, end in _SPAN_WORDS:
            if start not in words:
                continue
            index = words.index(start)
            match = by_name.get("_".join([*words[:index], end, *words[index + 1 :]]))
            if match is not None:
                found.append((key, match, "_".join([*words[:index], *words[index + 1 :]])))
                break
    return found


def compact_value(value: Any, key: str = "", *, skip: frozenset[str] = frozenset()) -> str:
    """``value`` (decoded JSON) rendered compactly: ``k=v, ...`` for an object (its ``skip``
    keys left out; in parentheses when nested), ``[a; b]`` for a list, scalars as in the
    module docstring."""
    if isinstance(value, Mapping):
        text, parts = _object(value, key, skip)
        return f"({text})" if key and (parts > 1 or "=" in text) else text
    if isinstance(value, list):
        newest = _newest(value)
        if newest is not None:
            # A history (shipment events, status changes): the newest is the state, as a
            # record read again replaces its older text; the raw record keeps the rest.
            earlier = len(value) - 1
            return f"[{earlier} earlier; {compact_value(newest, key)}]"
        items = [compact_value(item, key) for item in value]
        return "[" + "; ".join(i for i in items if i) + "]"
    return _scalar(key, value)


def _moment(record: Any) -> str | None:
    """The time ``record`` happened at (a ``at``, ``time``, ``timestamp`` or ``*_at`` value
    holding a date and a time), or ``None``."""
    if not isinstance(record, Mapping):
        return None
    for key, value in record.items():
        name = str(key).lower()
        moment_key = name in _MOMENT_KEYS or name.endswith("_at")
        if moment_key and isinstance(value, str) and _DATETIME.match(value):
            return value
    return None


def _newest(items: list[Any]) -> Mapping[str, Any] | None:
    """The newest record of ``items`` when it is a history: two or more records, each with
    a moment (:func:`_moment`); else ``None``."""
    if len(items) < 2:
        return None
    newest: tuple[str, int] | None = None
    for index, item in enumerate(items):
        moment = _moment(item)
        if moment is None:
            return None  # not a history: a plain list, read in full
        # ISO 8601 moments sort as text; the last of equal ones is the newest written.
        if newest is None or moment >= newest[0]:
            newest = (moment, index)
    assert newest is not None
    record: Mapping[str, Any] = items[newest[1]]
    return record


def _object(record: Mapping[str, Any], owner: str, skip: frozenset[str]) -> tuple[str, int]:
    parts: list[str] = []
    done = set(skip)
    first, last = record.get("first_name"), record.get("last_name")
    if isinstance(first, str) and isinstance(last, str):
        parts.append(f"{first} {last}")
        done |= {"first_name", "last_name"}
    for a, b in _PAIRS:
        start, end = record.get(a), record.get(b)
        if isinstance(start, str) and isinstance(end, str) and len(start) + len(end) <= 24:
            parts.append(f"{start}→{end}")
            done |= {a, b}
    for a, b, name in _spans(record):
        start, end = record.get(a), record.get(b)
        if a in done or b in done or not _short_scalars(start, end):
            continue
        span = f"{_scalar(a, start)}→{_scalar(b, end)}"
        parts.append(f"{name}={span}" if name else span)
        done |= {a, b}
    for raw_key, value in record.items():
        key = str(raw_key)
        if key in done or value in (None, "", [], {}) or (owner and _is_prose(value, record)):
            continue
        # A price table ({"prices": {"economy": 112}}) is money under its own keys.
        inner = owner if is_money_key(owner) and not is_money_key(key) else key
        inner_skip: frozenset[str] = frozenset()
        if isinstance(value, Mapping):
            # {"credit_card_9879898": {"id": "credit_card_9879898", "source": "credit_card",
            # ...}}: the id once, and not the kind its key names.
            inner_skip = frozenset(
                k
                for k, v in value.items()
                if (v == key and label_of(str(k)) is not None)
                or (isinstance(v, str) and v and key.startswith(f"{v}_"))
            )
        rendered = compact_value(value, inner, skip=inner_skip)
        if not rendered:
            continue
        # In a nested record, an identity, a date or a price needs no name:
        # flights=[(HAT097, 2024-05-17, $255)] rather than (flight_number=HAT097, ...).
        # So does a line of its owner (address1, address2 under address).
        bare = owner and (
            (label_of(key) is not None and isinstance(value, str))
            or key in _SELF_EVIDENT
            or (key.startswith(owner) and key[len(owner) :].isdigit())
        )
        parts.append(rendered if bare else f"{key}={rendered}")
    return ", ".join(parts), len(parts)


def _is_prose(value: Any, record: Mapping[str, Any]) -> bool:
    """Free text longer than :data:`_LONG_TEXT` that states no fact the record's short values
    do not: in a nested record (an item's catalogue description) it says nothing the entry
    needs."""
    if not isinstance(value, str) or len(value) <= _LONG_TEXT:
        return False
    short = " ".join(str(v) for v in record.values() if isinstance(v, str) and v != value)
    return set(fact_keys(value)) <= set(fact_keys(short))


def _short_scalars(*values: Any) -> bool:
    return all(
        isinstance(v, str | int | float) and not isinstance(v, bool) and len(str(v)) <= _SHORT_END
        for v in values
    )


NAMED_PART: Final = re.compile(r"^([\w .-]{1,40})=(.*)$", re.DOTALL)
"""A named part of an entry's text: ``name=value``."""


def split_parts(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator`` outside brackets and quotes."""
    parts: list[str] = []
    depth = start = 0
    quoted = False
    for index, char in enumerate(text):
        if char == '"' and (index == 0 or text[index - 1] != "\\"):
            quoted = not quoted
        elif not quoted and char in "([":
            depth += 1
        elif not quoted and char in ")]":
            depth -= 1
        elif not quoted and depth == 0 and text.startswith(separator, index):
            parts.append(text[start:index])
            start = index + len(separator)
    parts.append(text[start:])
    return [p for p in parts if p]


def merge_text(old: str, new: str) -> str:
    """The attributes of ``old`` updated by ``new``: a named part (``k=...``) of ``new``
    replaces ``old``'s of the same name, other parts of ``new`` are added; ``old``'s other
    parts stay (a profile read by one tool keeps what another tool said of it)."""
    if not old:
        return new
    named_new: dict[str, str] = {}
    plain_new: list[str] = []
    for part in split_parts(new, ", "):
        match = NAMED_PART.match(part)
        if match:
            named_new[match.group(1)] = part
        else:
            plain_new.append(part)
    out: list[str] = []
    for part in split_parts(old, ", "):
        match = NAMED_PART.match(part)
        out.append(named_new.pop(match.group(1)) if match and match.group(1) in named_new else part)
    out.extend(p for p in plain_new if p not in out)
    out.extend(named_new.values())
    return ", ".join(out)


def json_entries(
    value: Any, name: str, source: str, arguments: Mapping[str, Any] | None = None
) -> list[Entry] | None:
    """The ledger entries of a tool result decoded from JSON (module docstring); ``None``
    when it holds no record (the caller then writes one entry for the call).

    Args:
        value: the decoded result.
        name: the tool's name.
        source: id of the tool message.
        arguments: the call's decoded arguments: their first identity names a result that
            has none of its own (``get_user_details(user_id=...)`` → ``user ...``), or whose
            only identity echoes another argument and which never mentions the first
            (``apply_coupon(order_id=ORD-1, code=SPRING15)`` → ``{"code": "SPRING15",
            "new_total": 67.15}`` is about ``order ORD-1``: keyed by the coupon, two orders'
            coupons would be one entry, the newer replacing the older).
    """
    entries: list[Entry] = []
    asked = identity_of(arguments) if isinstance(value, Mapping) and value and arguments else None
    if asked is not None and arguments is not None:
        asked_key, label, ident = asked
        own = identity_of(value)
        if own is None or (_echoes(own, arguments, asked_key) and ident not in json.dumps(value)):
            entries.append(Entry(f"{label or name} {ident}", compact_value(value), source))
            return entries
    day = arguments.get("date") if arguments else None
    _collect(value, name, source, entries, listed=False, list_day=_day(day))
    return entries or None


def _day(value: Any) -> str:
    """The ``YYYY-MM-DD`` of a call's ``date`` argument ("" when it has none)."""
    return value[:10] if isinstance(value, str) and _DATE.match(value) else ""


def _echoes(identity: tuple[str, str, str], arguments: Mapping[str, Any], first: str) -> bool:
    """Whether a result's ``identity`` is the value of an argument other than the call's
    ``first`` identity argument (the coupon code the call applied)."""
    key, _label, value = identity
    given = arguments.get(key)
    return key != first and given is not None and str(given) == value


def _collect(
    value: Any,
    owner: str,
    source: str,
    out: list[Entry],
    *,
    listed: bool,
    day: str = "",
    list_day: str = "",
) -> None:
    """Entries of ``value``; ``day``: the date of the records of a list a call asked for a
    date (``list_day``: that date, given to the records of the lists inside ``value``)."""
    if isinstance(value, list):
        many = listed or len(value) > 1
        for item in value:
            _collect(item, owner, source, out, listed=many, day=list_day, list_day=list_day)
        return
    if not isinstance(value, Mapping):
        return
    identity = identity_of(value)
    if identity is None:
        # A wrapper ({"orders": [...], "count": 3}): its records are the entries.
        for key, item in value.items():
            if isinstance(item, list | Mapping):
                name = _singular(str(key))
                _collect(item, name, source, out, listed=listed, day=day, list_day=list_day)
        return
    id_key, label, ident = identity
    kind = label or _singular(owner) or "record"
    own = next((str(v)[:10] for k, v in value.items() if k == "date" and _DATE.match(str(v))), "")
    # A result listed for the date the call asked (search_direct_flight(date=...)) is that
    # day's record: HAT069 on the 20th and on the 21st are two flights, two entries.
    when = own or day
    skip = frozenset({id_key, "date"} if own else {id_key})
    key = f"{kind} {ident}" + (f" {when}" if when else "")
    out.append(Entry(key, compact_value(value, skip=skip), source, listed))


def _singular(word: str) -> str:
    word = word.replace("_", " ").strip()
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def parse_json(text: str) -> Any:
    """``text`` decoded when it is a JSON object or array, else ``None``."""
    stripped = text.strip()
    if stripped[:1] not in ("{", "[") or stripped[-1:] not in ("}", "]"):
        return None
    try:
        return json.loads(stripped)
    except (ValueError, RecursionError):
        return None


def merge(entries: Sequence[Entry], new: Sequence[Entry]) -> list[Entry]:
    """``entries`` updated by ``new``, least recently seen first: an entry with a known key
    replaces the old one (the newest state) and, like every new entry, goes last. A record
    seen in a list does not replace the fuller form it was read with on its own."""
    out = {entry.key: entry for entry in entries}
    for entry in new:
        old = out.pop(entry.key, None)
        if old is None:
            out[entry.key] = entry
        elif entry.listed and not old.listed:
            out[entry.key] = old
        else:
            out[entry.key] = attrs.evolve(entry, text=merge_text(old.text, entry.text))
    return list(out.values())

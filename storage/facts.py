"""What counts as a fact: the default extractor and its protocol.

The quality measure (:mod:`storage.eval`) counts these facts, and the summarizing layer clears
a tool result from a view only when the summary states every one of its facts
(:mod:`storage.layers.summarizing.clearing`).

A fact is a short normalized string, so the same fact written two ways is one fact:

- a PII placeholder, exactly (``<EMAIL_ADDRESS_3f9a2c1d>``);
- an email address, lower-cased;
- a date as ``date MM-DD`` (``2024-05-27``, ``May 27``, ``27th May`` and ``May 27, 2024``
  are one fact; the year is dropped, a conversation rarely spans two);
- an amount of money as ``$N`` (``$1,255.00``, ``1255 USD``, ``1255 dollars`` and, in a
  JSON tool result, a number under a key such as ``price``, ``amount``, ``balance`` or
  ``total``);
- an identifier or code: a token of letters and digits (``H9ZU1C``, ``HAT229``,
  ``sofia_kim_7287``, ``credit_card_9879898``; two digits at least, or capitals with a digit
  like ``2FBBAH``, so ``2-person`` is none), a code of 6 to 10 capital letters
  (``AQLBTL``), and the value of a JSON key naming an id or a number (``reservation_id``,
  ``flight_number``); the digit run of 4+ digits inside an identifier is a fact too, so
  "gift card 6276644" and ``gift_card_6276644`` share one;
- a number of 4+ digits (``9725``, the last four of a card) and a number with a unit
  (``3 bags`` → ``3 bag``).

Text that is a JSON document (a tool result, tool-call arguments) is walked key by key;
other text is read with regular expressions. Any callable ``text -> set of str`` can replace
the default (:class:`FactExtractor`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Set
from typing import Any, Final

__all__ = ["FactExtractor", "extract_facts"]

FactExtractor = Callable[[str], Set[str]]
"""``extractor(text) -> the facts the text states`` (normalized strings; see the module)."""

_MONTHS: Final = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        1,
    )
    for name in names
}
# Capitalized only: "you may 2 ..." is not a date.
_MONTH: Final = "|".join(m.capitalize() for m in sorted(_MONTHS, key=len, reverse=True))
_PLACEHOLDER: Final = re.compile(r"<[A-Z][A-Z0-9_]{0,63}_[0-9a-f]{8}>")
_EMAIL: Final = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
_ISO_DATE: Final = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})(?=\b|T)")
_MONTH_DAY: Final = re.compile(
    rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?!:)(?:,?\s+\d{{4}}\b)?"
)
_DAY_MONTH: Final = re.compile(
    rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH})\b(?:,?\s+\d{{4}}\b)?"
)
_NUMBER: Final = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_DOLLARS: Final = re.compile(rf"\$\s?({_NUMBER})")
_CURRENCY: Final = re.compile(rf"\b({_NUMBER})\s?(?:usd|dollars?)\b", re.IGNORECASE)
_UNIT: Final = re.compile(
    rf"\b({_NUMBER})\s?(bags?|baggages?|passengers?|hours?|minutes?|nights?|days?|seats?|"
    r"items?|kg|km|miles?|points?|percent|%)(?!\w)",
    re.IGNORECASE,
)
_TOKEN: Final = re.compile(r"[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)*")
_CAPS_CODE: Final = re.compile(r"^[A-Z]{6,10}$")
_LONG_DIGITS: Final = re.compile(r"\d{4,}")
# Letters-and-digits tokens that are not identifiers: ordinals, times, sizes.
_NOT_ID: Final = re.compile(
    r"^\d+(st|nd|rd|th|am|pm|h|hr|hrs|m|min|s|kg|km|mi|k|x|d)$|^\d{4}-\d{2}-\d{2}T\d", re.I
)
_MONEY_WORDS: Final = frozenset(
    {"price", "prices", "amount", "balance", "total", "cost", "fee", "fees", "refund", "paid"}
    | {"charge", "fare", "subtotal"}
)
_COUNT_WORDS: Final = frozenset(
    {"baggages", "bags", "seats", "passengers", "count", "items", "nights", "days", "number"}
)
_ID_KEYS: Final = re.compile(r"(^|_)(id|number|code|no|ref|reference)$", re.I)
_SINGULAR: Final = {"baggages": "bag", "baggage": "bag", "bags": "bag", "%": "percent"}


def extract_facts(text: str) -> frozenset[str]:
    """The facts ``text`` states, normalized (see the module docstring): the default
    :class:`FactExtractor`."""
    stripped = text.strip()
    if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
        try:
            document = json.loads(stripped)
        except (ValueError, RecursionError):
            pass
        else:
            facts: set[str] = set()
            _walk(document, "", facts)
            return frozenset(facts)
    return frozenset(_text_facts(text))


def _walk(value: Any, key: str, facts: set[str]) -> None:
    if isinstance(value, dict):
        for name, item in value.items():
            name = str(name)
            # An id as a key (payment_methods: {"credit_card_9879898": {...}}), not "line1".
            if _is_identifier(name) and _LONG_DIGITS.search(name):
                _add_identifier(name, facts)
            # A price under "prices": {"economy": 112} is money too.
            _walk(item, key if _is_money_key(key) else name, facts)
    elif isinstance(value, list):
        for item in value:
            _walk(item, key, facts)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int | float):
        if _is_money_key(key):
            facts.add("$" + _number(str(value)))
        elif _ID_KEYS.search(key) or abs(value) >= 1000:
            facts.add(_number(str(value)))
    elif isinstance(value, str):
        facts.update(_text_facts(value))
        if _ID_KEYS.search(key) and _TOKEN.fullmatch(value.strip()):
            facts.add(value.strip())


def _text_facts(text: str) -> Iterable[str]:
    facts: set[str] = set(_PLACEHOLDER.findall(text))
    text = _PLACEHOLDER.sub(" ", text)
    for match in _EMAIL.finditer(text):
        facts.add(match.group(0).lower())
    text = _EMAIL.sub(" ", text)
    for match in _ISO_DATE.finditer(text):
        facts.add(_date(int(match.group(2)), int(match.group(3))))
    for match in _MONTH_DAY.finditer(text):
        facts.add(_date(_MONTHS[match.group(1).lower()], int(match.group(2))))
    for match in _DAY_MONTH.finditer(text):
        facts.add(_date(_MONTHS[match.group(2).lower()], int(match.group(1))))
    for pattern in (_ISO_DATE, _MONTH_DAY, _DAY_MONTH):
        text = pattern.sub(" ", text)
    for pattern in (_DOLLARS, _CURRENCY):
        for match in pattern.finditer(text):
            facts.add("$" + _number(match.group(1)))
        text = pattern.sub(" ", text)
    for match in _UNIT.finditer(text):
        unit = match.group(2).lower()
        unit = _SINGULAR.get(unit, unit.removesuffix("s") if len(unit) > 3 else unit)
        facts.add(f"{_number(match.group(1))} {unit}")
    for match in _TOKEN.finditer(text):
        token = match.group(0)
        if _is_identifier(token):
            _add_identifier(token, facts)
        elif token.isdigit() and len(token) >= 4:
            facts.add(token)
    facts.discard("")  # an impossible date
    return facts


def _is_money_key(key: str) -> bool:
    words = set(re.split(r"[\W_]+", key.lower()))
    return bool(words & _MONEY_WORDS) and not words & _COUNT_WORDS


def _is_identifier(token: str) -> bool:
    if _CAPS_CODE.match(token):
        return True
    if len(token) < 4 or _NOT_ID.match(token):
        return False
    if not any(c.isalpha() for c in token):
        return False
    # A code in capitals (2FBBAH) or two digits at least: "2-person" and "line1" are none.
    return sum(c.isdigit() for c in token) >= 2 or (token.isupper() and len(token) >= 5)


def _add_identifier(token: str, facts: set[str]) -> None:
    facts.add(token)
    facts.update(_LONG_DIGITS.findall(token))


def _date(month: int, day: int) -> str:
    return f"date {month:02d}-{day:02d}" if 1 <= month <= 12 and 1 <= day <= 31 else ""


def _number(text: str) -> str:
    """``1,255.00`` → ``1255``; ``12.50`` → ``12.5``."""
    text = text.replace(",", "")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text or "0"

"""The facts a summarizer must not lose, or invent: identifiers, codes, amounts, dates, emails.

:func:`fact_spans` finds them in text; :func:`fact_key` normalizes one so that the same fact
written two ways compares equal (``$1,255.00`` and ``1255``; ``2024-05-17`` and ``May 17``).
The extractive summarizer uses them to keep fact-bearing sentences and to record where each
fact came from; the LLM summarizer uses them to check its output against its source.

What counts: PII placeholders (``<EMAIL_ADDRESS_3f9a2c1d>``), emails, ISO dates and
``Month day`` dates, amounts of money (``$255``, ``255 USD``), tokens mixing letters and
digits (``H9ZU1C``, ``HAT229``, ``sofia_kim_7287``, ``1Z999AA1``), codes of 6 to 10 capital
letters (``AQLBTL``), and numbers of two digits or more.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

__all__ = ["FACT_RE", "fact_key", "fact_keys", "fact_spans", "has_fact"]

_MONTHS: Final = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_MONTH_NUMBER: Final = {m.lower(): i for i, m in enumerate(_MONTHS, 1)} | {
    m[:3].lower(): i for i, m in enumerate(_MONTHS, 1)
}
_MONTH: Final = "|".join([*_MONTHS, *(m[:3] for m in _MONTHS if m != "May"), "Sept"])

FACT_RE: Final = re.compile(
    r"(?P<placeholder><[A-Z][A-Z0-9_]{0,63}_[0-9a-f]{8}>)"
    r"|(?P<email>[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,})"
    r"|(?P<iso>\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?)"
    rf"|(?P<spoken>\b(?:{_MONTH})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?\b(?!:)(?:,?\s+\d{{4}}\b)?)"
    r"|(?P<money>\$\s?\d[\d,]*(?:\.\d+)?|\b\d[\d,]*(?:\.\d+)?\s?(?:USD|dollars)\b)"
    r"|(?P<token>\b(?=[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9]+(?:[_-][A-Za-z0-9]+)*\b"
    r"|\b[A-Z]{6,10}\b)"
    r"|(?P<number>\b\d[\d,]*(?:\.\d+)?\b)"
)
"""One fact per match; the group name says which kind."""

# Letter-and-digit tokens that are no identifiers: ordinals, times, sizes, "gpt-4o"-like.
_NOT_ID: Final = re.compile(r"^\d+(st|nd|rd|th|am|pm|h|m|s|k|kg|km|mi|l|x|d)$", re.IGNORECASE)


def fact_spans(text: str) -> Iterator[tuple[str, int, int]]:
    """``(kind, start, end)`` of each fact in ``text``, in order; kinds: ``placeholder``,
    ``email``, ``date``, ``money``, ``id``, ``number`` (numbers of one digit are skipped)."""
    for match in FACT_RE.finditer(text):
        kind = match.lastgroup or ""
        value = match.group(0)
        if kind == "token":
            # Two digits at least: "line1", "2-year" and "gpt-4o" are not identifiers.
            code = value.isupper() and len(value) >= 5  # AQLBTL, 2FBBAH
            digits = sum(c.isdigit() for c in value)
            if not code and (_NOT_ID.match(value) or len(value) < 3 or digits < 2):
                continue
            kind = "id"
        elif kind in ("iso", "spoken"):
            kind = "date"
        elif kind == "number" and len(value.replace(",", "").split(".")[0]) < 2:
            continue
        yield kind, match.start(), match.end()


def has_fact(text: str) -> bool:
    """True when ``text`` holds at least one fact."""
    return next(fact_spans(text), None) is not None


def fact_key(kind: str, value: str) -> str:
    """The normalized form of a fact of ``kind`` (see :func:`fact_spans`): amounts and numbers
    as plain digits (``$1,255.00`` → ``1255``), dates as ``MM-DD``, emails lower-cased."""
    if kind in ("money", "number"):
        digits = re.sub(r"[^\d.]", "", value.replace(",", ""))
        if "." in digits:
            digits = digits.rstrip("0").rstrip(".")
        return digits.lstrip("0") or "0"
    if kind == "date":
        iso = re.match(r"\d{4}-(\d{2})-(\d{2})", value)
        if iso:
            return f"{iso.group(1)}-{iso.group(2)}"
        word, day = re.match(r"([A-Za-z]+)\.?\s+(\d{1,2})", value).groups()  # type: ignore[union-attr]
        return f"{_MONTH_NUMBER.get(word.lower()[:3], 0):02d}-{int(day):02d}"
    if kind == "email":
        return value.lower()
    return value


def fact_keys(text: str) -> dict[str, str]:
    """Each fact of ``text`` by its normalized key (:func:`fact_key`), mapped to the text as
    written (the first time)."""
    out: dict[str, str] = {}
    for kind, start, end in fact_spans(text):
        value = text[start:end]
        out.setdefault(fact_key(kind, value), value)
    return out

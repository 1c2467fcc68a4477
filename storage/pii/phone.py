"""Phone numbers: a linear candidate pattern, then format rules, then ``phonenumbers``.

Candidates are runs of digit groups joined by one space, dot or dash, with optional
parentheses, an optional leading ``+`` and an optional extension (``x123``, ``ext. 12``).
Then:

- International numbers (``+CC ...`` or ``00CC ...``) are checked with Google's
  libphonenumber port (:func:`phonenumbers.is_possible_number`: a real country code and a
  length that country allows). "Possible" rather than "valid" on purpose: made-up or newly
  allocated ranges are still someone's number, and the scrubber errs towards recall.
- National numbers have no country to check against, so format rules decide: a bare run
  must look like a NANP number (10 digits, area code 2-9, optionally after a 1) or a
  trunk-prefixed one (``0`` + 9-10 digits). A grouped run needs 7-12 digits, groups after
  the first of at least two digits, and a last group of 4+ digits when there are only two;
  it must not be a thousands-grouped amount (``1.234.567``, ``€ 723 813 266``), a US ZIP+4
  code or postal code, a range of years, or a house number (followed by a street name, or
  after "Suite", "Apt", "Box", ...).
- A candidate that fails, or that overlaps a date, UUID, version or labelled id
  (:class:`~storage.pii.protected.TextView`), is shortened group by group from the right
  (``call 555-123-4567 2 times``) before it is given up.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Final

import phonenumbers

from storage.pii.protected import TextView, ascii_twin

__all__ = ["find_phone_numbers"]

_CANDIDATE_RE: Final = re.compile(
    r"""
    (?=[+(\d][\d\ .\-()]{6})          # lookahead first: the engine skips to candidates fast
    (?:(?<![\w+\-.$€£¥#/@])|(?<=[^\W\d_])(?=\+))  # a "+" may follow a word: "at+1415..."
    (?:\+\ ?)?
    (?:\(\d{1,5}\)|\d{1,15})                                   # first group
    (?:[\ .\-]?\(\d{1,5}\)|(?:(?<=\))|[\ .\-])\d{1,15}){0,7}   # more groups, one separator
    (?:\ ?(?:x|ext\.?|extension)\ ?\d{1,6})?                   # extension
    (?!\w|[.\-]?\d)
    """,
    re.VERBOSE,
)
_CANDIDATE_ASCII: Final = ascii_twin(_CANDIDATE_RE)
_GROUP_RE: Final = re.compile(r"\(?\d+\)?")
_EXT_RE: Final = re.compile(r"\ ?(?:x|ext\.?|extension)\ ?\d{1,6}$")
_CURRENCY: Final = (
    r"[$€£¥₹]|\b(?:AUD|BRL|CAD|CHF|CNY|CZK|DKK|EUR|GBP|HUF|INR|JPY|MXN|NOK|PLN|RUB|SEK|USD|ZAR)\b"
)
_MONEY_BEFORE: Final = re.compile(rf"(?:{_CURRENCY})\ ?$")
_MONEY_AFTER: Final = re.compile(
    rf"\ ?(?:{_CURRENCY}|(?i:dollars?|euros?|pounds?|yen|francs?|kronor|kroner)\b)"
)


_ADDRESS_AFTER: Final = re.compile(
    r"(?:\ [A-Z][\w'.\-]*){0,3}\ (?i:street|str|st|road|rd|avenue|ave|lane|ln|drive|dr|court|ct"
    r"|close|place|pl|boulevard|blvd|terrace|crescent|square|highway|hwy|parkway|pkwy|rue|via"
    r"|calle|avenida|strasse|straße|gasse|weg|vej|gatan)\b"
)
_ADDRESS_BEFORE: Final = re.compile(r"(?i:\b(?:suite|apt|apartment|unit|box|floor|room))\.?\ $")


@lru_cache(maxsize=4096)
def _possible_international(number: str) -> bool:
    try:
        parsed = phonenumbers.parse(number, None)
    except phonenumbers.NumberParseException:
        return False
    return phonenumbers.is_possible_number(parsed)


def _national_ok(
    groups: list[str], digits: str, seps: str, text: str, start: int, end: int
) -> bool:
    """The format rules for a number without a country code (see the module docstring)."""
    n = len(digits)
    if len(groups) == 1 and groups[0][0] != "(":
        return (
            (n == 10 and digits[0] in "23456789")
            or (n == 11 and digits[0] == "1" and digits[1] in "23456789")
            or (n in (10, 11) and digits[0] == "0" and digits[1] != "0")
        )
    if not 7 <= n <= 12:
        return False
    first = groups[0]
    if len(first) == 1 and not (first == "1" and n == 11):
        return False
    if any(len(g) < 2 for g in groups[1:]):
        return False
    thousands = len(first) <= 3 and all(len(g) == 3 for g in groups[1:])
    if "." in seps and (len(first) < 2 or thousands):
        return False  # 1.234.567 is an amount; dotted phones group like 01.84.17.61.18
    if len(groups) == 2:
        if len(groups[1]) < 4:
            return False  # two-group numbers end in 4+ digits: "3378 217" is a street number
        if all(len(g) == 4 and g[:2] in ("19", "20") for g in groups):
            return False  # a range of years, "1984-1995"
        if seps == "-" and len(first) == 5:
            return False  # a US ZIP+4 code, "12345-6789"
    if seps == " " and (
        _ADDRESS_AFTER.match(text, end) or _ADDRESS_BEFORE.search(text, max(0, start - 12), start)
    ):
        return False  # a house number: "975 3968 Bay Street", "Suite 541 6343"
    # Not an amount: "€ 723 813 266", "12 345 678 EUR".
    return not thousands or not (
        _MONEY_BEFORE.search(text, max(0, start - 5), start) or _MONEY_AFTER.match(text, end)
    )


def _valid(text: str, start: int, end: int, groups: list[str], digits: str) -> bool:
    """Whether ``text[start:end]`` (digit groups ``groups``, their digits ``digits``, maybe an
    extension after them) is a phone number."""
    if digits.count(digits[0]) == len(digits):
        return False
    if text[start] == "+":
        body = text[start:end]
        ext = _EXT_RE.search(body)
        return _possible_international(body[: ext.start()] if ext else body)
    if len(groups) > 1 and groups[0].startswith("00") and len(groups[0]) <= 5:
        return _possible_international("+" + digits[2:])
    body = text[start:end]  # its separators, in sorted order
    seps = (
        (" " if " " in body else "") + ("-" if "-" in body else "") + ("." if "." in body else "")
    )
    return _national_ok(groups, digits, seps, text, start, end)


def _longest(
    view: TextView, start: int, end: int, found: list[re.Match[str]], ext: bool
) -> tuple[int | None, bool]:
    """The longest valid phone number in ``text[start:end]`` starting at ``start``: try the
    whole, then without the extension, then without each trailing group. Returns its end (or
    ``None``) and whether a valid cut was refused for overlapping a date or labelled id."""
    text = view.text
    written = [g.group() for g in found]
    groups = [g.strip("()") for g in written]
    sizes = [0]  # digits in the first n groups
    for g in groups:
        sizes.append(sizes[-1] + len(g))
    digits = "".join(groups)
    cuts = [(end, len(groups))] if ext else []
    cuts.extend((found[n - 1].end(), n) for n in range(len(groups), 0, -1))
    blocked = False
    for cut, n in cuts:
        if sizes[n] < 7:
            break
        if cut < end and text[cut] in ".-":
            continue  # the run goes on ("4111-1111-1111-1234"): no part of it is a phone
        if sizes[n] <= 15 and _valid(text, start, cut, written[:n], digits[: sizes[n]]):
            if not view.never_match(start, cut):
                return cut, blocked
            blocked = True
    return None, blocked


def find_phone_numbers(view: TextView) -> Iterator[tuple[int, int]]:
    """Phone numbers in international and national formats (see the module docstring)."""
    if not view.has_digit:
        return
    text = view.text
    pos = 0
    candidates = _CANDIDATE_ASCII if view.ascii else _CANDIDATE_RE
    while (m := candidates.search(text, pos)) is not None:
        start, end = m.span()
        pos = end
        if end - start < 7:
            continue
        ext = _EXT_RE.search(text, start, end)
        found = list(_GROUP_RE.finditer(text, start, ext.start() if ext else end))
        cut, blocked = _longest(view, start, end, found, ext is not None)
        if cut is None and len(found) > 2 and len(found[0].group().strip("()")) == 1:
            # A stray digit in front ("0 (555) 010-4477"): try from the next group.
            second = found[1].start()
            if text[second - 1] == " " or text[second] == "(":
                start = second
                cut, blocked = _longest(view, start, end, found[1:], ext is not None)
        if cut is not None:
            yield start, cut
            pos = cut
        elif blocked:
            pos = found[0].end()  # a date or id in front ("2024-01-01 555-010-4477")

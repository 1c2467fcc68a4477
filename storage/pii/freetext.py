"""Free-text rules for personal data people type: dates of birth, street addresses, ZIP codes.

Presidio has no entity for a date of birth (its ``DATE_TIME`` covers every date and time), so
these use custom names in Presidio's style: ``DATE_OF_BIRTH``, ``STREET_ADDRESS`` and
``ZIP_CODE`` (Presidio's sample data uses the last two names for the same things).

- ``DATE_OF_BIRTH``: a date (``1990-04-05``, ``04/05/1990``, ``4.5.90``, ``April 5, 1990``,
  ``5th of April 1990``, ``Apr 5th '90`` is not: two-digit years need a numeric form) within a
  short window after a birth word (``born``, ``birth``, ``birthday``, ``DOB``, ``d.o.b.``) or
  right before ``(DOB)``. A flight date, a booking date or a time is not one.
- ``STREET_ADDRESS``: a house number, one to four capitalised name words and a street suffix
  (``975 Sunset Drive``, ``12 N. Main St.``), optionally a unit (``, Apt 4B``, ``Suite 217``);
  the continental forms ``Via Franscini 71``, ``Rua do Arenque 1634``, ``Koskikatu 25``; and a
  unit alone (``Suite 501``, ``Apt. 864``).
- ``ZIP_CODE``: a US ZIP or ZIP+4 after a state (``Austin, TX 78750``), or any postal code
  (digits, ``SW1A 1AA``, ``K1A 0B1``, ``394 13``) right after ``zip``, ``zip code``,
  ``postal code`` or ``postcode``.

Every pattern starts where a lookbehind allows, repeats boundedly and runs possessively, and
contexts are checked in fixed-size windows: linear in the text length, like every rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from storage.pii.protected import TextView

__all__ = ["find_dates_of_birth", "find_street_addresses", "find_zip_codes"]

# --- dates of birth ---------------------------------------------------------------------------
_MONTH: Final = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)
_DAY: Final = r"(?:3[01]|[12]\d|0?[1-9])(?:st|nd|rd|th)?"
_YEAR: Final = r"(?:1[89]\d\d|20\d\d)"
_DATE_RE: Final = re.compile(
    rf"""
    (?<![\w/.\-])
    (?:{_YEAR}[\-/.](?:1[0-2]|0?[1-9])[\-/.](?:3[01]|[12]\d|0?[1-9])       # 1990-04-05
      |(?:3[01]|[12]\d|0?[1-9])[\-/.](?:3[01]|[12]\d|0?[1-9])[\-/.](?:{_YEAR}|\d\d)  # 04/05/90
      |{_MONTH}\ {{1,3}}{_DAY},?\ {{1,3}}{_YEAR}                             # April 5, 1990
      |{_DAY}\ {{1,3}}(?:of\ {{1,3}})?{_MONTH},?\ {{1,3}}{_YEAR}             # 5th of April 1990
    )
    (?![\w/]|[.\-:]\d)
    """,
    re.IGNORECASE | re.VERBOSE,
)
_BIRTH_BEFORE: Final = re.compile(
    r"(?i:\b(?:born|birth|birthday|birthdate|dob|d\.o\.b)\b)[^.!?\n\d]{0,40}$|"
    r"(?i:\bdob|\bd\.o\.b\.?)[\s:=\-]{0,3}$"
)
_BIRTH_AFTER: Final = re.compile(r"\s{0,2}\(?(?i:dob|d\.o\.b\.?|date of birth|born)\b")
_WINDOW: Final = 56


_BIRTH_WORDS: Final = ("irth", "IRTH", "born", "Born", "BORN", "dob", "DOB", "Dob", "o.b")


def find_dates_of_birth(view: TextView) -> Iterator[tuple[int, int]]:
    """Dates written near a birth word (see the module docstring)."""
    if not view.has_digit:
        return
    text = view.text
    if not any(word in text for word in _BIRTH_WORDS):
        return  # substring scans in C: most text has no birth word, so no date is looked for
    for m in _DATE_RE.finditer(text):
        start, end = m.span()
        if _BIRTH_BEFORE.search(text, max(0, start - _WINDOW), start) or _BIRTH_AFTER.match(
            text, end
        ):
            yield start, end


# --- street addresses ---------------------------------------------------------------------------
_SUFFIX: Final = (
    r"(?:street|st|road|rd|avenue|ave|av|lane|ln|drive|dr|court|ct|boulevard|blvd|terrace|ter"
    r"|crescent|cres|square|sq|highway|hwy|parkway|pkwy|circle|cir|trail|trl|way|place|pl"
    r"|alley|plaza|loop|row|walk|pike|expressway|expy|freeway|fwy|path|point|pt|ridge|run"
    r"|hollow|heights|hts|mews|close|grove|gardens|green|hill|park|view|cove|crossing|xing"
    r"|landing|glen|meadows?|estates?|junction|jct|str)"
)
_NAME_WORD: Final = r"(?:[A-Z][\w'\-]{0,24}+\.?|\d{1,3}(?:st|nd|rd|th))"
_DIRECTION: Final = r"(?:[NSEW]\.?|North|South|East|West|NE|NW|SE|SW)\ {1,2}"
# Found from each house number, so the engine only stops at digits: a number-first street
# after it (975 Sunset Drive), or the word before it: a unit (Suite 501), a compound street
# name (Koskikatu 25) or a street-type word up to four words back (Via Franscini 71).
_NUMBER_RE: Final = re.compile(r"(?=\d)(?<![\w\-/.#,])\d{1,6}(?:[A-Za-z]|-\d{1,4})?(?!\w|[.,]\d)")
_STREET_AFTER_RE: Final = re.compile(
    rf"\ {{1,2}}(?:{_DIRECTION})?(?:{_NAME_WORD}\ {{1,2}}){{1,4}}?(?i:{_SUFFIX})\b\.?"
)
_UNIT_WORDS: Final = frozenset(
    {"apt", "apartment", "suite", "ste", "unit", "flat", "floor", "bldg", "building"}
)
_STREET_WORDS: Final = frozenset(
    {"via", "viale", "rua", "rue", "calle", "avenida", "strada", "piazza", "plac", "ulica", "ul"}
)
_PARTICLES: Final = frozenset({"do", "da", "de", "del", "della", "di", "dos", "das", "des", "du"})
_COMPOUND_RE: Final = re.compile(
    r"[A-ZÀ-Þ][\w'\-]*(?:katu|tie|kuja|polku|gata|gatan|vej|veien|vegen|stien|gasse"
    r"|stra(?:ss|ß)e|weg|laan|straat|plein|utca|tér|tee|ulice)"
)
_UNIT_AFTER_RE: Final = re.compile(
    r",?\ {1,2}(?:(?i:apt|apartment|suite|ste|unit|flat|floor|bldg|building)\.?\ {0,2}\#?"
    r"|\#)\ {0,2}[A-Za-z]?\d{1,6}[A-Za-z]?(?!\w)"
)


def _words_before(text: str, start: int, count: int) -> list[tuple[int, str]]:
    """Up to ``count`` words before ``start`` on its line, nearest first, as (start, word);
    stops at a word without a letter. Constant work per call (each word is 24 chars at most).
    """
    out: list[tuple[int, str]] = []
    pos = start
    for _ in range(count):
        end = pos
        while end > 0 and end > pos - 3 and text[end - 1] in " #":
            end -= 1
        if end == pos or end == 0:
            break
        begin = end - 1
        floor = max(0, end - 25)
        while begin > floor and not text[begin - 1].isspace():
            begin -= 1
        if begin > 0 and not text[begin - 1].isspace():
            break  # a longer run than any street word
        word = text[begin:end]
        if not any(ch.isalpha() for ch in word):
            break
        out.append((begin, word))
        pos = begin
    return out


def find_street_addresses(view: TextView) -> Iterator[tuple[int, int]]:
    """Street addresses and address units (see the module docstring)."""
    if not view.has_digit:
        return
    text = view.text
    pos = 0
    while (m := _NUMBER_RE.search(text, pos)) is not None:
        start, end = m.span()
        pos = end
        street = _STREET_AFTER_RE.match(text, end)
        if street is not None:
            end = street.end()
        else:
            before = _words_before(text, start, 4)
            if not before:
                continue
            first, word = before[0]
            bare = word.rstrip(".").lower()
            if bare in _UNIT_WORDS or _COMPOUND_RE.fullmatch(word.rstrip(".,")) is not None:
                start = first
            else:
                # "Via Franscini 71", "Rua do Arenque 1634": a capitalised street word, then
                # capitalised names or particles (so "via Miami on May 17" is no address).
                for n, (at, candidate) in enumerate(before):
                    if candidate[0].isupper() and candidate.rstrip(".").lower() in _STREET_WORDS:
                        if all(w[0].isupper() or w in _PARTICLES for _, w in before[:n]):
                            start = at
                        break
                if start == m.start():
                    continue
        unit = _UNIT_AFTER_RE.match(text, end)
        if unit is not None:
            end = unit.end()
        pos = end
        yield start, end


# --- ZIP and postal codes -----------------------------------------------------------------------
_STATES: Final = (
    "AL|AK|AZ|AR|CA|CO|CT|DE|DC|FL|GA|HI|ID|IL|IN|IA|KS|KY|LA|ME|MD|MA|MI|MN|MS|MO|MT|NE|NV|NH"
    "|NJ|NM|NY|NC|ND|OH|OK|OR|PA|RI|SC|SD|TN|TX|UT|VT|VA|WA|WV|WI|WY|PR"
)
_ZIP_RE: Final = re.compile(r"(?=\d)(?<![\w\-.])\d{5}(?:-\d{4})?(?![\w\-]|[.,]\d)")
_STATE_BEFORE_RE: Final = re.compile(rf"(?<![A-Za-z])(?:{_STATES}),?\ {{1,2}}\Z")
_POSTAL: Final = (
    r"(?:\d{4}\ ?[A-Z]{2}(?![\w\-])|\d{5}(?:-\d{4})?|\d{3}\ \d{2}|\d{4,6}(?:-\d{3})?"
    r"|[A-Z]{1,2}\d[A-Z\d]?\ ?\d[A-Z]{2}|[A-Z]\d[A-Z]\ ?\d[A-Z]\d)"
)
_KEYWORD_ZIP_RE: Final = re.compile(
    rf"(?i:\b(?:zip|zip\ ?code|postal\ code|post\ ?code|postcode)\b)(?:\ {{0,2}}(?:is|:|=|-|\#))?"
    rf"\ {{0,2}}({_POSTAL})(?![\w\-])"
)
_ZIP_WORDS: Final = ("zip", "Zip", "ZIP", "ostal", "OSTAL", "ostcode", "OSTCODE", "ost code")


def find_zip_codes(view: TextView) -> Iterator[tuple[int, int]]:
    """ZIP and postal codes in an address context (see the module docstring)."""
    if not view.has_digit:
        return
    text = view.text
    for m in _ZIP_RE.finditer(text):
        start = m.start()
        if _STATE_BEFORE_RE.search(text, max(0, start - 5), start):
            yield m.span()
    if any(word in text for word in _ZIP_WORDS):
        for m in _KEYWORD_ZIP_RE.finditer(text):
            yield m.span(1)

"""Free-text rules for personal data people type: dates of birth, street addresses, ZIP codes.

Presidio has no entity for a date of birth (its ``DATE_TIME`` covers every date and time), so
these use custom names in Presidio's style: ``DATE_OF_BIRTH``, ``STREET_ADDRESS`` and
``ZIP_CODE`` (Presidio's sample data uses the last two names for the same things).

- ``DATE_OF_BIRTH``: a date (``1990-04-05``, ``04/05/1990``, ``4.5.90``, ``April 5, 1990``,
  ``5th of April 1990``, ``Apr 5th '90`` is not: two-digit years need a numeric form) within a
  short window after a birth word (``born``, ``birth``, ``birthday``, ``DOB``, ``d.o.b.``) or
  right before ``(DOB)``. A flight date, a booking date or a time is not one.
- ``STREET_ADDRESS``: a house number, one to four capitalised name words and a street suffix
  (``975 Sunset Drive``, ``12 N. Main St.``, ``500 Oak Ridge Road``), optionally a unit
  (``, Apt 4B``, ``Suite 217``, ``, Floor 3``, ``#12``); the continental forms
  ``Via Franscini 71``, ``Rua do Arenque 1634``, ``Koskikatu 25``; and a unit or box alone
  (``Suite 501``, ``Apt. 864``, ``Flat 3,``, ``Unit 8505 Box 9220``, ``P.O. Box 242``).
  Numbered phrases are not addresses: a labelled number (``room 12``, ``floor 3``,
  ``flight HAT 123``, ``Order 4521``, ``gate 22``), a time (``10:30``), a price, a count
  (``5 Minutes Walk``, ``Suite 2 nights``, ``3 Wall Street analysts``, ``2 Lime Green
  shirts``), a suffix that is an everyday word written lower-case (``2 Ocean view``), and
  ``unit``/``flat`` followed by a lower-case word (``unit 5 of the course``, ``a flat 25
  fee``).
- ``ZIP_CODE``: a US ZIP or ZIP+4 after a state (``Austin, TX 78750``; ``Order ID 48213``
  is an id, not Idaho), or any postal code
  (digits, ``SW1A 1AA``, ``K1A 0B1``, ``394 13``) right after ``zip``, ``zip code``,
  ``postal code`` or ``postcode``.

Every pattern starts where a lookbehind allows, repeats boundedly and runs possessively, and
contexts are checked in fixed-size windows: linear in the text length, like every rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from storage.pii.protected import TextView, ascii_twin

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
def _words(spaced: str) -> frozenset[str]:
    return frozenset(spaced.split())


# Suffixes that are street words in any case ("12 Main st", "5 Elm street").
_STREET_SUFFIX: Final = (
    r"street|st|str|road|rd|avenue|ave|av|lane|ln|boulevard|blvd|dr|highway|hwy|parkway|pkwy"
    r"|expressway|expy|freeway|fwy|ter|cres|sq|cir|trl|pl|pt|ct|xing|jct|hts"
)
# Suffixes that are also everyday words count only capitalised ("2 Ocean view rooms"). After
# any suffix, a lower-case plural noun says the number counted it ("3 Power Point slides").
_COMMON_SUFFIXES: Final = _words(
    "drive court terrace crescent square circle trail way place alley plaza loop row"
    " walk pike path point ridge run hollow heights mews close grove gardens green hill park"
    " view cove crossing landing glen meadow meadows estate estates junction"
)
_SUFFIX: Final = _STREET_SUFFIX + "|" + "|".join(sorted(_COMMON_SUFFIXES, key=len, reverse=True))
_NAME_WORD: Final = r"(?:[A-Z][\w'\-]{0,24}+\.?|\d{1,3}(?:st|nd|rd|th))"
_DIRECTION: Final = r"(?:[NSEW]\.?|North|South|East|West|NE|NW|SE|SW)\ {1,2}"
# Found from each house number, so the engine only stops at digits: a number-first street
# after it (975 Sunset Drive), or the word before it: a unit (Suite 501), a compound street
# name (Koskikatu 25) or a street-type word up to four words back (Via Franscini 71). A
# number glued to a colon, a currency sign or a dot is a time, a price or a decimal.
_NUMBER_RE: Final = re.compile(
    r"\d(?<=(?<![\w\-/.#,:$€£])\d)\d{0,5}(?:[A-Za-z]|-\d{1,4})?(?!\w|[.,:]\d)"
)
_NUMBER_ASCII: Final = ascii_twin(_NUMBER_RE)
_STREET_AFTER_RE: Final = re.compile(
    rf"\ {{1,2}}(?:{_DIRECTION})?(?P<name>{_NAME_WORD})\ {{1,2}}(?:{_NAME_WORD}\ {{1,2}}){{0,3}}?"
    rf"(?P<suffix>(?i:{_SUFFIX}))\b\.?"
    rf"(?:\ {{1,2}}(?=[A-Z])(?i:{_STREET_SUFFIX})\b\.?)?"  # a second suffix: Oak Ridge Road
)
# A unit on its own is an address: "Suite 501", "Apt. 864", "P.O. Box 242". "Unit" and
# "Flat" are everyday words too ("unit 5 of the course", "a flat 25 fee"), so alone they
# need an address after them; "floor" and "building" count only after a street.
_UNIT_WORDS: Final = frozenset({"apt", "apartment", "suite", "ste", "unit", "flat"})
_PLAIN_UNIT_WORDS: Final = frozenset({"unit", "flat"})
_PO_BOX: Final = frozenset({"p.o", "po"})
_STREET_WORDS: Final = frozenset(
    {"via", "viale", "rua", "rue", "calle", "avenida", "strada", "piazza", "plac", "ulica", "ul"}
)
_PARTICLES: Final = frozenset({"do", "da", "de", "del", "della", "di", "dos", "das", "des", "du"})
_COMPOUND_RE: Final = re.compile(
    r"[A-ZÀ-Þ][\w'\-]*(?:katu|tie|kuja|polku|gata|gatan|vej|veien|vegen|stien|gasse"
    r"|stra(?:ss|ß)e|weg|laan|straat|plein|utca|tér|(?<![tns])tee|ulice)"  # not Committee
)
_UNIT_AFTER_RE: Final = re.compile(
    r",?\ {1,2}(?:(?i:apt|apartment|suite|ste|unit|flat|floor|bldg|building)\.?\ {0,2}\#?"
    r"|\#)\ {0,2}[A-Za-z]?\d{1,6}[A-Za-z]?(?!\w)"
)
# A number right after one of these labels is that thing's number, not a house number:
# "Room 12 Garden View", "flight 123", "Order 4521", "gate 22", "bought 2 ...".
_LABEL_WORDS: Final = _words(
    "about account acct add added approx approximately around bed berth book booked booking"
    " bought bus buy cabin car carriage case chapter claim class coach confirmation customer"
    " day deck dock episode every exit fl flight floor flt gate grade group hall hour id"
    " invoice issue item just lesson level line locker member model module month need needs"
    " night only order ordered over pack packed page part pg phase pier platform purchase"
    " purchased receipt ref reference reservation reserve reserved rm room round row season"
    " seat section sector sell size sku slot sold stage step stop table task team terminal"
    " than top total track train under user ver version vol volume want wants ward week wing"
    " x year zone"
)
# What a count is of (a time, a distance, people, luggage): never a street name's first word,
# and a unit or street followed by one was a quantity ("Suite 2 nights", "5 Minutes Walk").
_COUNT_WORDS: Final = _words(
    "a.m adult adults am bags beds blocks child children connections copies days dollars eur"
    " euros feet files flights ft gbp guests hour hours hr hrs infants items kids kilometers"
    " kilometres km kms layovers legs lessons meters metres miles min mins minute minutes month"
    " months night nights orders p.m pages passengers pax people percent persons pieces pm"
    " pounds rooms seats sec second seconds secs segments slides steps stops suitcases tickets"
    " times travelers travellers units usd week weeks yards year years yr yrs"
)
_FOLLOW_RE: Final = re.compile(r"\ {1,2}([A-Za-z][A-Za-z.]{0,23})(?![\w])")
# A lower-case word ending in -s that is a verb or an adverb, not what a number counted.
_NOT_PLURAL: Final = _words(
    "was has does goes its yes always perhaps besides towards afterwards sometimes whereas"
    " nowadays hers ours yours theirs upstairs downstairs overseas indoors outdoors needs gets"
    " looks belongs means seems sits lies stands faces runs leads takes makes gives keeps"
)
_ARTICLES: Final = frozenset({"a", "an", "the", "per", "one"})
# After a lone "Unit 8505" / "Flat 3": the end, a comma or line break, a box, a capital or
# a number (the address goes on), never a lower-case word ("unit 5 of the course").
_PLACE_FOLLOWS_RE: Final = re.compile(
    r"\ {0,2}(?:\Z|[\n\r,;)\]}\"'])|\ {1,2}(?:(?i:box)\b|[A-Z\d])"
)


def _word_before(text: str, pos: int) -> tuple[int, str] | None:
    """The word before ``pos`` on its line as (start, word), or ``None``: none there, a run
    longer than any street word, or one without a letter. A leading quote mark (``>Apt. 805``)
    is not part of the word. Constant work (a word is 24 characters at most)."""
    end = pos
    while end > 0 and end > pos - 3 and text[end - 1] in " #":
        end -= 1
    if end == pos or end == 0:
        return None
    # The word starts after the last white space before its last character (at most 24 back).
    floor = max(0, end - 25)
    if end - 1 == floor or text[end - 2].isspace():
        begin = end - 1  # a word of one character
    else:
        begin = end - 1 - len(text[floor : end - 1].rsplit(None, 1)[-1])
    if begin > 0 and not text[begin - 1].isspace():
        return None  # a longer run than any street word
    while begin < end - 1 and text[begin] in ">*-•(\"'[":
        begin += 1
    word = text[begin:end]
    if not word.isalpha() and (len(word) == 1 or not any(ch.isalpha() for ch in word)):
        return None
    return begin, word


def _words_before(text: str, start: int, count: int) -> list[tuple[int, str]]:
    """Up to ``count`` words before ``start`` (see :func:`_word_before`), nearest first."""
    out: list[tuple[int, str]] = []
    pos = start
    for _ in range(count):
        word = _word_before(text, pos)
        if word is None:
            break
        out.append(word)
        pos = word[0]
    return out


def _counted(text: str, end: int, street: bool) -> bool:
    """Whether the word after ``end`` says the number before was a count: a count word, or
    (after a ``street``) any lower-case plural noun ("2 Disney Park tickets")."""
    follow = _FOLLOW_RE.match(text, end)
    if follow is None:
        return False
    word = follow.group(1).rstrip(".")
    lower = word.lower()
    if lower in _COUNT_WORDS:
        return True
    return (
        street
        and word.islower()
        and len(word) > 2
        and word.endswith("s")
        and not word.endswith(("ss", "us", "is"))
        and lower not in _NOT_PLURAL
    )


def _number_first_street(text: str, start: int, street: re.Match[str]) -> bool:
    """Whether the number at ``start`` and the ``street`` after it are a house address."""
    if street["name"].rstrip(".").lower() in _COUNT_WORDS:
        return False  # "5 Minutes Walk", "10 AM Central Time"
    suffix = street["suffix"]
    if suffix.lower() in _COMMON_SUFFIXES and not suffix[0].isupper():
        return False  # "2 Ocean view", "3 Large Pizzas way"
    if _counted(text, street.end(), street=True):
        return False  # "3 Wall Street analysts"
    before = _words_before(text, start, 1)
    if not before:
        return True
    label = before[0][1].rstrip(".:")
    if label.isupper() and label.isalpha() and len(label) <= 3:
        return False  # a flight or route code: "HAT 123", "UA 2014"
    return label.lower() not in _LABEL_WORDS


def _address_before(text: str, start: int, end: int) -> int:
    """Where an address that ends with the number ``start:end`` begins: at a unit, a compound
    street name or a street-type word before it; ``start`` when there is none."""
    nearest = _word_before(text, start)
    if nearest is None:
        return start
    first, word = nearest
    bare = word.rstrip(".,").lower()
    second = _word_before(text, first) if bare == "box" or bare in _PLAIN_UNIT_WORDS else None
    if bare == "box" and second is not None and second[1].lower().rstrip(".") in _PO_BOX:
        return second[0]  # "P.O. Box 242"
    if bare in _UNIT_WORDS:
        if bare in _PLAIN_UNIT_WORDS and (
            _PLACE_FOLLOWS_RE.match(text, end) is None
            or (second is not None and second[1].lower() in _ARTICLES)
        ):
            return start
        return first
    if _COMPOUND_RE.fullmatch(word.rstrip(".,")) is not None:
        return first
    # "Via Franscini 71", "Rua do Arenque 1634": up to four words back, a capitalised street
    # word after capitalised names or particles only (so "via Miami on May 17" is none).
    at, candidate = nearest
    for n in range(4):
        if candidate[0].isupper() and candidate.rstrip(".").lower() in _STREET_WORDS:
            return at
        if n == 3 or not (candidate[0].isupper() or candidate in _PARTICLES):
            return start
        farther = _word_before(text, at)
        if farther is None:
            return start
        at, candidate = farther
    return start


def find_street_addresses(view: TextView) -> Iterator[tuple[int, int]]:
    """Street addresses and address units (see the module docstring)."""
    if not view.has_digit:
        return
    text = view.text
    numbers = _NUMBER_ASCII if view.ascii else _NUMBER_RE
    pos = 0
    while (m := numbers.search(text, pos)) is not None:
        start, end = m.span()
        pos = end
        street = _STREET_AFTER_RE.match(text, end)
        if street is not None and _number_first_street(text, start, street):
            end = street.end()
        else:
            start = _address_before(text, start, end)
            if start == m.start() or _counted(text, end, street=False):
                continue  # no address, or a count: "Suite 2 nights", "Katie 3 years"
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
_ZIP_RE: Final = re.compile(r"\d(?<=(?<![\w\-.])\d)\d{4}(?:-\d{4})?(?![\w\-]|[.,]\d)")
_ZIP_ASCII: Final = ascii_twin(_ZIP_RE)
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
    for m in (_ZIP_ASCII if view.ascii else _ZIP_RE).finditer(text):
        start = m.start()
        state = _STATE_BEFORE_RE.search(text, max(0, start - 5), start)
        if state is None:
            continue
        label = _words_before(text, state.start(), 1)  # "Order ID 48213" is no Idaho ZIP
        if not label or label[0][1].rstrip(".:").lower() not in _LABEL_WORDS:
            yield m.span()
    if any(word in text for word in _ZIP_WORDS):
        for m in _KEYWORD_ZIP_RE.finditer(text):
            yield m.span(1)

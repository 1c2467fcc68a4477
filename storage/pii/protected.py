"""Text that number detectors must never take for PII, and the per-text view detectors share.

Dates, ISO timestamps, UUIDs/GUIDs, version strings and labelled identifiers (order numbers,
SKUs, tracking numbers) are made of digit groups that look like phone, card or SSN numbers.
:class:`TextView` finds them once per text, lazily (only when a number candidate exists),
and number detectors drop or shorten a candidate that overlaps one. Hex digests and tool-call
ids (``call_abc123``, ``toolu_01...``) need no entry: number detectors refuse digits that
touch a letter or an underscore.

The view also holds the text's *shape*: its bytes with every ASCII digit turned into ``0``
and every ASCII letter into ``a`` (one ``bytes.translate``), so a detector can ask in one
substring search whether the text holds what each of its matches must contain (``0000 0000``
for a grouped card number, ``0.0`` for an IP address or a version) before it runs a regex.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from functools import partial
from typing import Final

__all__ = ["NEVER_MATCH_RES", "TextView", "ascii_twin"]

_DIGIT: Final = re.compile(r"\d")


def ascii_twin(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """``pattern`` compiled with ``re.ASCII``: on a text that is all ASCII it matches exactly
    where ``pattern`` does (``\\d``, ``\\w``, ``\\s``, ``\\b`` and case folding agree there)
    and scans faster. Detectors take it when :attr:`TextView.ascii` is true."""
    return re.compile(pattern.pattern, (pattern.flags & ~re.UNICODE) | re.ASCII)


# Split by what they start with: a pattern that opens with a lookahead for a digit or a
# character class lets the regex engine skip fast to where it can match.
_DATES_RE: Final = re.compile(
    r"""
    (?=\d)(?<!\d)
    (?:\d{4}-\d{2}-\d{2}                                 # ISO 8601 date, optionally with time
       (?:[T\ ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?(?:\ ?(?:Z|[+-]\d{2}(?::?\d{2})?))?)?
     | \d{8}T\d{4,6}(?:Z|[+-]\d{4})?                     # ISO 8601 basic format
     | (?:19|20)\d{2}([./])(?:0?[1-9]|1[0-2])\1(?:0?[1-9]|[12]\d|3[01])(?!\d)     # Y.M.D
     | (?:0?[1-9]|[12]\d|3[01])([./-])(?:0?[1-9]|1[0-2])\2(?:19|20)\d{2}(?!\d)    # D.M.Y
     | (?:0?[1-9]|1[0-2])([./-])(?:0?[1-9]|[12]\d|3[01])\3(?:19|20)\d{2}(?!\d)    # M/D/Y
    )
    """,
    re.VERBOSE,
)
_UUID_RE: Final = re.compile(
    r"(?=[0-9A-Fa-f])[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
)
_LABELLED_RE: Final = re.compile(
    r"""
    (?i:(?<![\w.])v|\bversion[\ :]*|\bver\.?\ ?|\brelease[\ :]*)     # v1.2.3, version 1.2
      \d+(?:\.\d+)+(?:[-+][0-9A-Za-z][0-9A-Za-z.\-]*)?
  | (?:==|>=|<=|~=|!=|\^|~)\ ?\d+(?:\.\d+)+               # requirement specifiers
  | (?<![\w.])\d+\.\d+\.\d+-(?i:alpha|beta|rc|dev|pre|post|snapshot)[0-9A-Za-z.\-]*
  | (?i:\b(?:sku|item|order|part|model|serial|invoice|ticket|tracking|confirmation|booking
        |reservation|ref)(?:\ ?(?:no\.?|number|num|id|code))?\ ?[:\#]?\ ?)   # labelled ids
    [A-Za-z0-9][\w\-./]*
    """,
    re.VERBOSE,
)
# SKU-like dash-joined tokens with a part mixing letters and digits: "WH-1000XM4", "BK-M68B-42".
_DASHED_RE: Final = re.compile(r"(?<![\w-])[A-Za-z0-9]+(?:-[A-Za-z0-9]+)+(?![\w-])")
_EXTENSION_RE: Final = re.compile(r"\d+(?:x|ext)\d+")
#: Every pattern of text that number detectors never match (besides mixed dashed tokens).
NEVER_MATCH_RES: Final = (_DATES_RE, _UUID_RE, _LABELLED_RE)
_TWIN: Final = {rx: ascii_twin(rx) for rx in (*NEVER_MATCH_RES, _DASHED_RE)}


# ASCII digits -> "0", ASCII letters -> "a", every other byte kept.
_SHAPE: Final = bytes(
    48 if 48 <= b <= 57 else 97 if 65 <= b <= 90 or 97 <= b <= 122 else b for b in range(256)
)
_ASCII: Final = bytes(range(128))


def _cuts_but(keep: str) -> bytes:
    """A table marking with "\n" every byte but ``keep`` (all that one pattern can consume,
    and whatever its lookarounds tell apart from the end of a text)."""
    return bytes(32 if chr(b) in keep else 10 for b in range(256))


_WORD: Final = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"
# Where a pattern's matches cannot reach: no span of it crosses one of its cuts, and at one
# each of its lookarounds sees what it sees at the end of a text. So the spans that can
# overlap a candidate are found between the cuts around it alone, each pattern in its own
# window (a log line's IP address is checked against the dates in " 10.1.2.3 ", not against
# the file). Cut at every byte a pattern cannot consume, for ASCII text.
_KINDS: Final = (
    (_DATES_RE, _cuts_but("0123456789-T :.,Z+/")),
    (_UUID_RE, _cuts_but("0123456789abcdefABCDEF-")),
    (_LABELLED_RE, _cuts_but(_WORD + " :-./+=<>~!^#")),
    (_DASHED_RE, _cuts_but(_WORD + "-")),
)
_PRE_RELEASE_RE: Final = re.compile("-(?:alpha|beta|rc|dev|pre|post|snapshot)")
_LABEL_WORD_RE: Final = re.compile(
    "sku|item|order|part|model|serial|invoice|ticket|tracking|confirmation|booking|reservation|ref"
)


def _patterns(text: str, shape: bytes | None) -> Iterator[re.Pattern[str]]:
    """The patterns of :data:`NEVER_MATCH_RES` that can match ``text`` (of that shape)."""
    if shape is None:
        yield from NEVER_MATCH_RES
        return
    for rx in NEVER_MATCH_RES:
        if _may_match(rx, text, shape):
            yield rx


def _may_match(rx: re.Pattern[str], text: str, shape: bytes) -> bool:
    """Whether ``rx`` (one of :data:`NEVER_MATCH_RES`) can match ``text`` of ``shape``."""
    if rx is _DATES_RE:  # every date form has a separator or a "T" between two digits
        return b"0.0" in shape or b"0-0" in shape or b"0/0" in shape or b"0a0" in shape
    if rx is _UUID_RE:
        return shape.count(b"-") >= 4
    # Versions ("v1.2", "version 1.2", "release 2.0"), requirement specifiers ("==1.2", "~1.2")
    # and pre-releases ("1.2.3-rc1") have "digits.digits"; labelled ids a label word. Words
    # match ignoring case, so a text outside ASCII (with its case folds) always runs it.
    if not text.isascii():
        return True
    lower = text.lower()
    if _LABEL_WORD_RE.search(lower) is not None:
        return True
    return b"0.0" in shape and (
        "v" in lower
        or "release" in lower
        or "=" in text
        or "^" in text
        or "~" in text
        or ("-" in text and _PRE_RELEASE_RE.search(lower) is not None)
    )


def _mixed(part: str) -> bool:
    """A part mixing letters and digits, other than a phone extension such as ``3560x45``."""
    return not part.isdigit() and not part.isalpha() and _EXTENSION_RE.fullmatch(part) is None


def _never_match_spans(
    text: str, lo: int, hi: int, shape: bytes | None
) -> tuple[list[int], list[int]]:
    """The merged protected spans of ``text[lo:hi]`` (``lo`` and ``hi`` at cuts or the ends),
    with ``shape`` that of ``text[lo:hi]`` or of a text holding it (``None``: unknown)."""
    starts: list[int] = []
    ends: list[int] = []
    # Each pattern runs only where the shape holds what every match of it contains.
    window = text[lo:hi]
    twin = _TWIN if window.isascii() else None
    spans = [
        m.span()
        for rx in _patterns(window, shape)
        for m in (twin[rx] if twin else rx).finditer(text, lo, hi)
    ]
    if "-" in window:
        for m in (twin[_DASHED_RE] if twin else _DASHED_RE).finditer(text, lo, hi):
            if any(_mixed(part) for part in m.group().split("-")):
                spans.append(m.span())
    spans.sort()
    for start, end in spans:  # merge, so the ends stay sorted for bisect
        if starts and start <= ends[-1]:
            ends[-1] = max(ends[-1], end)
        else:
            starts.append(start)
            ends.append(end)
    return starts, ends


_Spans = tuple[list[int], list[int]]  # starts and ends of sorted, disjoint spans


def _kind_spans(kind: int, text: str, lo: int, hi: int, shape: bytes) -> _Spans:
    """The spans of pattern ``kind`` (:data:`_KINDS`) in the ASCII ``text[lo:hi]``, between
    its cuts, with ``shape`` that of ``text[lo:hi]``; none where its shape rules it out."""
    rx = _KINDS[kind][0]
    starts: list[int] = []
    ends: list[int] = []
    found: Iterator[re.Match[str]]
    if rx is _DASHED_RE:
        if b"-" not in shape:
            return starts, ends
        found = (
            m
            for m in _TWIN[rx].finditer(text, lo, hi)
            if any(_mixed(part) for part in m.group().split("-"))
        )
    elif _may_match(rx, text[lo:hi], shape):
        found = _TWIN[rx].finditer(text, lo, hi)
    else:
        return starts, ends
    for m in found:  # one pattern's matches: in order, disjoint
        starts.append(m.start())
        ends.append(m.end())
    return starts, ends


def _overlaps(spans: _Spans, start: int, end: int) -> bool:
    starts, ends = spans
    i = bisect_right(starts, end - 1) - 1  # last span starting before ``end``
    return i >= 0 and ends[i] > start


class _Cuts:
    """The cuts of one text for one pattern (or for all, at line breaks), as "\n" marks:
    found near a candidate with one search, farther away in an index built once, so that a
    long text without cuts costs linear time, not a search per candidate."""

    __slots__ = ("_find", "_index", "_rfind", "_size")

    def __init__(self, marks: bytes | str) -> None:
        self._find: Callable[[int, int], int]
        self._rfind: Callable[[int, int], int]
        if isinstance(marks, bytes):
            self._find, self._rfind = partial(marks.find, b"\n"), partial(marks.rfind, b"\n")
        else:
            self._find, self._rfind = partial(marks.find, "\n"), partial(marks.rfind, "\n")
        self._size = len(marks)
        self._index: list[int] | None = None

    def around(self, start: int, end: int) -> tuple[int, int]:
        """The window ``[lo, hi)`` between the cuts around ``[start, end)``."""
        lo = self._rfind(max(0, start - _NEAR), start)
        if lo < 0 and start > _NEAR:
            index = self._cut_index()
            i = bisect_left(index, start)
            lo = index[i - 1] if i else -1
        hi = self._find(end, end + _NEAR)
        if hi < 0:
            hi = self._size
            if end + _NEAR < self._size:
                index = self._cut_index()
                i = bisect_left(index, end)
                hi = index[i] if i < len(index) else self._size
        return lo + 1, hi

    def _cut_index(self) -> list[int]:
        if self._index is None:
            index: list[int] = []
            at = self._find(0, self._size)
            while at >= 0:
                index.append(at)
                at = self._find(at + 1, self._size)
            self._index = index
        return self._index


_NEAR: Final = 256  # how far one search looks for a cut before the index is used


class TextView:
    """One text under scan, with facts computed at most once and only when asked.

    Attributes:
        text: the text.
        shape: the text's UTF-8 bytes with ASCII digits as ``0`` and ASCII letters as ``a``
            (other bytes kept), or ``None`` when the text holds a decimal digit outside ASCII
            (Arabic-Indic ``٣``, fullwidth digits), which ``\\d`` matches but the shape cannot
            show.
        digits: how many decimal digits it holds (with ``shape`` ``None``: its length, a
            bound).
        has_digit: whether it holds any decimal digit (number detectors skip it otherwise).
        ascii: whether it is all ASCII (detectors then scan it with :func:`ascii_twin`).
    """

    __slots__ = (
        "_cuts",
        "_kind",
        "_lines",
        "_never",
        "ascii",
        "digits",
        "has_digit",
        "shape",
        "text",
    )

    def __init__(self, text: str) -> None:
        self.text = text
        shape: bytes | None
        self.ascii = text.isascii()
        if self.ascii:
            shape = text.encode("ascii").translate(_SHAPE)
        else:
            raw = text.encode("utf-8", "surrogatepass")
            others = raw.translate(None, _ASCII).decode("utf-8", "surrogatepass")
            shape = None if _DIGIT.search(others) else raw.translate(_SHAPE)
        self.shape = shape
        self.digits = len(text) if shape is None else shape.count(b"0")
        self.has_digit = self.digits > 0
        self._cuts: tuple[_Cuts, ...] | None = None
        self._lines: _Cuts | None = None
        self._never: dict[tuple[int, int], _Spans] = {}
        self._kind: dict[tuple[int, int, int], _Spans] = {}

    def never_match(self, start: int, end: int) -> bool:
        """True when ``[start, end)`` overlaps a date, UUID, version string or labelled id."""
        text, shape = self.text, self.shape
        if self.ascii and shape is not None:  # (an ASCII text always has a shape)
            if shape.startswith(b"0000-00-00", start) and (start == 0 or shape[start - 1] != 48):
                return True  # an ISO date starts here (a JSON date value): the first pattern
            return self._ascii_never_match(start, end, text, shape)
        # Outside ASCII (byte offsets are not character offsets) cut at line breaks only:
        # no protected span holds one; the whole text's shape still bounds the window's.
        if self._lines is None:
            self._lines = _Cuts(text)
        lo, hi = self._lines.around(start, end)
        spans = self._never.get((lo, hi))
        if spans is None:
            spans = self._never[lo, hi] = _never_match_spans(text, lo, hi, shape)
        return _overlaps(spans, start, end)

    def _ascii_never_match(self, start: int, end: int, text: str, shape: bytes) -> bool:
        """:meth:`never_match` of an ASCII text: each pattern in the window of its own cuts."""
        if self._cuts is None:
            raw = text.encode("ascii")
            self._cuts = tuple(_Cuts(raw.translate(table)) for _, table in _KINDS)
        for kind, cuts in enumerate(self._cuts):
            lo, hi = cuts.around(start, end)
            spans = self._kind.get((kind, lo, hi))
            if spans is None:
                spans = self._kind[kind, lo, hi] = _kind_spans(kind, text, lo, hi, shape[lo:hi])
            if _overlaps(spans, start, end):
                return True
        return False

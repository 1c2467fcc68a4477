"""Text that number detectors must never take for PII, and the per-text view detectors share.

Dates, ISO timestamps, UUIDs/GUIDs, version strings and labelled identifiers (order numbers,
SKUs, tracking numbers) are made of digit groups that look like phone, card or SSN numbers.
:class:`TextView` finds them once per text, lazily (only when a number candidate exists),
and number detectors drop or shorten a candidate that overlaps one. Hex digests and tool-call
ids (``call_abc123``, ``toolu_01...``) need no entry: number detectors refuse digits that
touch a letter or an underscore.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from typing import Final

__all__ = ["NEVER_MATCH_RES", "TextView"]

_DIGIT: Final = re.compile(r"\d")

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


def _mixed(part: str) -> bool:
    """A part mixing letters and digits, other than a phone extension such as ``3560x45``."""
    return not part.isdigit() and not part.isalpha() and _EXTENSION_RE.fullmatch(part) is None


def _never_match_spans(text: str) -> tuple[list[int], list[int]]:
    starts: list[int] = []
    ends: list[int] = []
    spans = [m.span() for rx in NEVER_MATCH_RES for m in rx.finditer(text)]
    if "-" in text:
        for m in _DASHED_RE.finditer(text):
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


class TextView:
    """One text under scan, with facts computed at most once and only when asked.

    Attributes:
        text: the text.
        has_digit: whether it holds any decimal digit (number detectors skip it otherwise).
    """

    __slots__ = ("_never", "has_digit", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.has_digit = _DIGIT.search(text) is not None
        self._never: tuple[list[int], list[int]] | None = None

    def never_match(self, start: int, end: int) -> bool:
        """True when ``[start, end)`` overlaps a date, UUID, version string or labelled id."""
        if self._never is None:
            self._never = _never_match_spans(self.text)
        starts, ends = self._never
        i = bisect_right(starts, end - 1) - 1  # last protected span starting before ``end``
        return i >= 0 and ends[i] > start

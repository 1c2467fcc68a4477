"""Rule-based detectors: regular expressions plus the checksums and validators behind them.

Every detector here runs in time linear in the text: candidates start only where a negative
lookbehind allows (never in the middle of a run the pattern could also have started at),
runs are consumed possessively, and repetitions are bounded, so no input can make the
engine backtrack more than a constant amount per position. E-mail addresses are found from
each ``@`` instead, scanning the runs on either side once. Number patterns open with a digit
(the lookbehind then checks the character before it), which lets the engine skip quickly
to where they can match; an ASCII text is scanned with their ``re.ASCII`` twins.

Sources of the rules: Luhn (ISO/IEC 7812-1) for payment cards; ISO 13616 mod-97 and the
SWIFT IBAN registry's per-country lengths for IBANs; the SSA's never-issued SSN ranges
(area 000, 666, 900-999, group 00, serial 0000); RFC 5322 ``atext`` for e-mail local parts;
RFC 4291 text forms for IPv6 (validated by :mod:`ipaddress`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Final

import attrs

from storage.pii.prefilter import may_hold_ipv4, may_hold_ipv6
from storage.pii.protected import TextView, ascii_twin

__all__ = [
    "IBAN_LENGTHS",
    "Detector",
    "RegexDetector",
    "SpanFinder",
    "find_credit_cards",
    "find_emails",
    "find_ibans",
    "find_ip_addresses",
    "find_us_ssns",
    "iban_is_valid",
    "luhn_is_valid",
]

#: A custom detector: any callable that returns the ``(start, end)`` spans of one entity.
Detector = Callable[[str], Iterable[tuple[int, int]]]
#: The internal form every detector is adapted to.
SpanFinder = Callable[[TextView], Iterable[tuple[int, int]]]


def _compile(pattern: str | re.Pattern[str]) -> re.Pattern[str]:
    return pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)


@attrs.frozen
class RegexDetector:
    """A custom detector from a regular expression, with an optional validator.

    Args:
        pattern: a compiled pattern or its source. Keep it linear: anchor candidates with a
            lookbehind and avoid nested unbounded repetition.
        validator: called with the matched text; the match counts only when it returns True.
        group: which group of the match is the PII (0 = the whole match).

    Raises:
        re.error: ``pattern`` does not compile.
    """

    pattern: re.Pattern[str] = attrs.field(converter=_compile)
    validator: Callable[[str], bool] | None = None
    group: int = 0

    def __call__(self, text: str) -> Iterator[tuple[int, int]]:
        validator, group = self.validator, self.group
        for m in self.pattern.finditer(text):
            start, end = m.span(group)
            if start < end and (validator is None or validator(text[start:end])):
                yield start, end


# --- e-mail -------------------------------------------------------------------------------
# Found from each "@": the local part is the run of RFC 5322 atext (and dots) that ends at it,
# cut after characters that in practice introduce an address ("email=a@b.c", "x|a@b.c"), and
# the domain is the run of labels after it. Each run is scanned once: linear time.
_ATEXT: Final = r"\w.!#$%&'*+/=?^`{|}~\-"
_LOCAL_RE: Final = re.compile(rf"(?<![{_ATEXT}])[{_ATEXT}]++\Z")
_DOMAIN_RE: Final = re.compile(r"[\w\-]++(?:\.[\w\-]++)*+")
_LOCAL_CUT: Final = re.compile(r".*[=/?&|]")
_USERINFO_RE: Final = re.compile(r"[^\s:/@?#]*:")
_TLD_PREFIX_RE: Final = re.compile(r"[^\W\d_]{2,}(?=[\d_\-])")


def _tld_ok(label: str) -> bool:
    return (len(label) >= 2 and label.isalpha()) or label[:4].lower() == "xn--"


def _in_url_userinfo(text: str, at: int) -> bool:
    """``text[at:]`` is the password of ``scheme://user:password@host`` (not an e-mail)."""
    scheme = text.rfind("://", max(0, at - 256), at)
    return scheme >= 0 and _USERINFO_RE.fullmatch(text, scheme + 3, at) is not None


def find_emails(view: TextView) -> Iterator[tuple[int, int]]:
    """E-mail addresses ``local@domain.tld`` (the TLD alphabetic or an IDN ``xn--`` label)."""
    text = view.text
    at = text.find("@")
    left = 0
    while at >= 0:
        local = _LOCAL_RE.search(text, left, at)
        domain = _DOMAIN_RE.match(text, at + 1)
        left = at + 1
        at = text.find("@", left)
        if local is None or domain is None:
            continue
        start, local_end = local.span()
        if text[start - 1 : start] == ":" and _in_url_userinfo(text, start):
            continue
        cut = _LOCAL_CUT.match(text, start, local_end)
        if cut is not None and cut.end() < local_end:  # unless nothing would be left ("&@a.io")
            start = cut.end()
        trimmed = start
        while trimmed < local_end and text[trimmed] in ".'`":
            trimmed += 1
        if trimmed < local_end:
            start = trimmed
        labels = domain.group().split(".")
        if not _tld_ok(labels[-1]):
            # Text glued after the address ("a@b.com212-555-0147"): keep the TLD's letters.
            letters = _TLD_PREFIX_RE.match(labels[-1])
            if letters is not None:
                labels[-1] = letters.group()
        while len(labels) > 2 and not _tld_ok(labels[-1]):
            labels.pop()
        if len(labels) < 2 or not _tld_ok(labels[-1]):
            continue
        yield start, domain.start() + len(".".join(labels))


# --- payment cards ------------------------------------------------------------------------
_CARD_RE: Final = re.compile(
    r"""
    \d(?<=(?<![\w+\-.])\d)   # a digit first (the engine skips to one fast), then what is before it
    (?:\d{11,18}                                             # bare
      |\d{3}([ \-])\d{4}\1\d{4}\1\d{1,4}(?:\1\d{1,3})?       # 4-4-4-4(-3)
      |\d{3}([ \-])\d{6}\2\d{4,5})                           # 4-6-5 Amex, 4-6-4 Diners
    (?!\w|[.\-]\d)
    """,
    re.VERBOSE,
)
_CARD_ASCII: Final = ascii_twin(_CARD_RE)


def luhn_is_valid(digits: str) -> bool:
    """The Luhn (mod 10) check of ISO/IEC 7812-1 over a string of decimal digits."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def find_credit_cards(view: TextView) -> Iterator[tuple[int, int]]:
    """Payment card numbers: 12-19 digits, bare or in 4-digit groups (spaces or dashes),
    issuer digit 1-6, passing Luhn; never after ``+`` (phone numbers) or inside longer runs."""
    if not view.has_digit:
        return
    for m in (_CARD_ASCII if view.ascii else _CARD_RE).finditer(view.text):
        digits = m.group().replace(" ", "").replace("-", "")
        if (
            digits[0] in "123456"
            and digits.count(digits[0]) != len(digits)
            and luhn_is_valid(digits)
            and not view.never_match(*m.span())
        ):
            yield m.span()


# --- US SSN -------------------------------------------------------------------------------
_SSN_RE: Final = re.compile(
    r"(\d(?<=(?<![\w+\-.$/#])\d)\d{2})([\- ])(\d{2})\2(\d{4})(?!\w|[.\-]?\d)"
)
_SSN_ASCII: Final = ascii_twin(_SSN_RE)


def find_us_ssns(view: TextView) -> Iterator[tuple[int, int]]:
    """US Social Security numbers ``AAA-GG-SSSS`` (or spaced) in ranges the SSA can issue."""
    if not view.has_digit:
        return
    for m in (_SSN_ASCII if view.ascii else _SSN_RE).finditer(view.text):
        area, _, group, serial = m.groups()
        if (
            area not in ("000", "666")
            and area[0] != "9"
            and group != "00"
            and serial != "0000"
            and not view.never_match(*m.span())
        ):
            yield m.span()


# --- IBAN ---------------------------------------------------------------------------------
#: IBAN length by country code, from the SWIFT IBAN registry.
IBAN_LENGTHS: Final[dict[str, int]] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22,
    "BI": 27, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DJ": 27,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FK": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HN": 28, "HR": 21, "HU": 28,
    "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20, "LB": 28,
    "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "LY": 25, "MC": 27, "MD": 24, "ME": 22,
    "MK": 19, "MN": 20, "MR": 27, "MT": 31, "MU": 30, "NI": 28, "NL": 18, "NO": 15, "OM": 23,
    "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "RU": 33, "SA": 24,
    "SC": 31, "SD": 18, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "SO": 23, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20, "YE": 30,
}  # fmt: skip
# Matched from the check digits (a digit-led pattern is scanned for fast); the country code
# is checked by the lookbehind and taken back into the span by the finder.
_IBAN_RE: Final = re.compile(
    r"\d(?<=(?<!\w)[A-Za-z]{2}\d)\d(?:[ ]?[A-Za-z0-9]{4}){2,8}(?:[ ]?[A-Za-z0-9]{1,4})?(?!\w)"
)
_IBAN_ASCII: Final = ascii_twin(_IBAN_RE)


def iban_is_valid(iban: str) -> bool:
    """ISO 13616: known country, the registry's length, and the mod-97 check equal to 1."""
    iban = iban.replace(" ", "").upper()
    if IBAN_LENGTHS.get(iban[:2]) != len(iban) or not iban.isalnum():
        return False
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


def find_ibans(view: TextView) -> Iterator[tuple[int, int]]:
    """IBANs, compact or in groups of four, any letter case; a match running past the
    country's length (a following word) is cut to it before the mod-97 check."""
    if not view.has_digit:
        return
    text = view.text
    for m in (_IBAN_ASCII if view.ascii else _IBAN_RE).finditer(text):
        start = m.start() - 2
        length = IBAN_LENGTHS.get(text[start : m.start()].upper())
        if length is None:
            continue
        end, seen = start, 0
        while end < m.end() and seen < length:
            if text[end] != " ":
                seen += 1
            end += 1
        if seen == length and iban_is_valid(text[start:end]):
            yield start, end


# --- IP addresses -------------------------------------------------------------------------
_OCTET: Final = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4_RE: Final = re.compile(rf"(?=\d)(?<![\w.])(?:{_OCTET}\.){{3}}{_OCTET}(?!\w|\.\d)")
_IPV6_RE: Final = re.compile(
    r"(?=[0-9A-Fa-f:])(?<![\w:.])[0-9A-Fa-f:]{2,39}(?:(?<=:)(?:\d{1,3}\.){3}\d{1,3})?(?:%[\w.]{1,32})?"
    r"(?![\w:]|\.\w)"
)
_IPV4_ASCII: Final = ascii_twin(_IPV4_RE)
_IPV6_ASCII: Final = ascii_twin(_IPV6_RE)


def find_ip_addresses(view: TextView) -> Iterator[tuple[int, int]]:
    """IPv4 in dotted-quad form (no leading zeros, not part of a longer dotted run or a
    version string) and IPv6 in any RFC 4291 text form, validated with :mod:`ipaddress`."""
    if not view.has_digit:
        return
    text = view.text
    if may_hold_ipv4(view):
        for m in (_IPV4_ASCII if view.ascii else _IPV4_RE).finditer(text):
            if not view.never_match(*m.span()):
                yield m.span()
    if may_hold_ipv6(view):
        for m in (_IPV6_ASCII if view.ascii else _IPV6_RE).finditer(text):
            candidate = m.group()
            if candidate.count(":") < 2 or not any(ch.isdigit() for ch in candidate):
                continue
            try:
                ipaddress.IPv6Address(candidate.split("%", 1)[0])
            except ValueError:
                continue
            yield m.span()

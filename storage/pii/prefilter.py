"""Which built-in detectors can match a text, decided before any of them runs.

Most texts a scrubber sees cannot hold any entity: a JSON value (``"economy"``,
``"2024-05-24"``, ``"ATL"``), prose without digits, code. Every built-in detector has a
necessary condition, something each of its matches contains: an ``@`` for an e-mail address,
12 digits and a 4-digit run for a card number, ``000-00-0000`` (digits as ``0``) for an SSN.
:func:`possible` checks them all on the text's shape (:class:`~storage.pii.protected.TextView`)
with a few substring searches, which run in C and far faster than a regex scan, and returns
the detectors left to run as a bit mask. A condition is never a guess: it only skips a
detector that could not have found anything, so results are the same with or without it
(``tests/pii/test_prefilter.py`` checks each one against its detector). A text with a decimal
digit outside ASCII has no shape: every detector runs on it.
"""

from __future__ import annotations

import re
from typing import Final

from storage.pii.protected import TextView

__all__ = ["ALL", "BITS", "may_hold_ipv4", "may_hold_ipv6", "plain_word", "possible"]

#: One bit per built-in entity.
BITS: Final = {
    name: 1 << i
    for i, name in enumerate(
        (
            "PRIVATE_KEY",
            "JWT",
            "API_KEY",
            "PASSWORD",
            "EMAIL_ADDRESS",
            "IBAN_CODE",
            "CREDIT_CARD",
            "US_SSN",
            "IP_ADDRESS",
            "PHONE_NUMBER",
            "DATE_OF_BIRTH",
            "STREET_ADDRESS",
            "ZIP_CODE",
        )
    )
}
ALL: Final = sum(BITS.values())
_PRIVATE_KEY, _JWT, _API_KEY, _PASSWORD, _EMAIL = (
    BITS[n] for n in ("PRIVATE_KEY", "JWT", "API_KEY", "PASSWORD", "EMAIL_ADDRESS")
)
_IBAN, _CARD, _SSN, _IP, _PHONE = (
    BITS[n] for n in ("IBAN_CODE", "CREDIT_CARD", "US_SSN", "IP_ADDRESS", "PHONE_NUMBER")
)
_DOB, _STREET, _ZIP = (BITS[n] for n in ("DATE_OF_BIRTH", "STREET_ADDRESS", "ZIP_CODE"))

# An API key (but a SendGrid "SG." one) is a run of 15 or more characters of [A-Za-z0-9_-]
# (the shortest: "xoxb-" or "xapp-" and ten more), not preceded by one, that starts with one
# of these prefixes (the literal openings of credentials._API_KEY_RE).
_KEY_RUN: Final = bytes(
    119 if 48 <= b <= 57 or 65 <= b <= 90 or 97 <= b <= 122 or b in b"_-" else 32
    for b in range(256)
)  # "w" for [A-Za-z0-9_-], a space for anything else
_KEY_RUN_15: Final = b"w" * 15
_KEY_PREFIXES: Final = (
    "sk-", "sk_", "rk_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-",
    "xoxa-", "xoxb-", "xoxe-", "xoxo-", "xoxp-", "xoxr-", "xoxs-", "xapp-", "AKIA", "ASIA",
    "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA", "AIza", "hf_", "npm_", "pypi-", "shpat_",
    "shpss_", "shpca_", "shppa_", "dop_v1_", "gsk_", "r8_", "pplx-", "xai-",
)  # fmt: skip
_KEY_PREFIX_RE: Final = re.compile("|".join(re.escape(p) for p in _KEY_PREFIXES))
# An IBAN's country code, check digits and first two groups of four.
_IBAN_START: Final = re.compile(rb"aa00 ?[a0]{4} ?[a0]{4}")
# The last three octets of a dotted quad; in IPv6 written in full, four groups between colons.
_QUAD: Final = re.compile(rb"\.0{1,3}\.0{1,3}\.0")
_IPV6_GROUPS: Final = re.compile(rb":[0a]{1,4}:[0a]{1,4}:[0a]{1,4}:[0a]{1,4}:")


def may_hold_ipv4(view: TextView) -> bool:
    """Whether ``view`` can hold a dotted-quad IPv4 address."""
    return view.shape is None or _QUAD.search(view.shape) is not None


def may_hold_ipv6(view: TextView) -> bool:
    """Whether ``view`` can hold an IPv6 address: ``::`` or eight groups."""
    shape = view.shape
    return shape is None or b"::" in shape or _IPV6_GROUPS.search(shape) is not None


def _may_hold_key(text: str, shape: bytes) -> bool:
    """Whether an API key with a known prefix can start in ``text`` (see ``_KEY_PREFIXES``),
    given that ``shape`` has a run of 15."""
    if "SG." in text or not text.isascii():  # offsets in ``runs`` are bytes, not characters
        return "SG." in text or _KEY_PREFIX_RE.search(text) is not None
    runs = shape.translate(_KEY_RUN)
    at = runs.find(_KEY_RUN_15)
    while at >= 0:  # at each run of 15 or more: its start
        if text.startswith(_KEY_PREFIXES, at):
            return True
        after = runs.find(b" ", at)
        if after < 0:
            return False
        at = runs.find(_KEY_RUN_15, after)
    return False


def plain_word(text: str) -> bool:
    """Whether ``text`` is a short word no built-in detector can match, told without a view:
    under 15 characters (the shortest API key or IBAN) and an identifier (letters, digits,
    ``_``, not starting with a digit: every digit follows a word character, where no number
    starts, and there is no separator, ``@``, ``.`` or space), or under 7 letters and digits
    (fewer than the shortest phone number)."""
    size = len(text)
    return size < 15 and (text.isidentifier() or (size < 7 and text.isalnum()))


# Where a phone number can start: "+", "(" or a digit not after a word character or one of
# "+-.$#/@" (phone._CANDIDATE_RE), then six more of its characters. Checked on short shapes
# only, which are judged once each ("credit_card_7815826" holds none).
_PHONE_START: Final = re.compile(rb"(?<![\w+\-.$#/@])[0(][0 .\-()]{6}|\+[0 .\-()]{6}")
# What the shape leaves to the text itself, on top of BITS.
_KEY_TEXT, _JWT_TEXT, _PEM_TEXT, _ZIP_WORD, _DOB_WORD = (1 << n for n in range(13, 18))
_TEXT: Final = _KEY_TEXT | _JWT_TEXT | _PEM_TEXT | _ZIP_WORD | _DOB_WORD
_BY_SHAPE: dict[bytes, int] = {}  # short shapes repeat (JSON values): each is judged once
_CACHED_SHAPE: Final = 64
_MAX_SHAPES: Final = 4096


def possible(view: TextView) -> int:
    """The bits (:data:`BITS`) of the built-in detectors that can find something in ``view``."""
    shape = view.shape
    if shape is None:
        return ALL
    found = _BY_SHAPE.get(shape)
    if found is None:
        found = _by_shape(shape, view.digits)
        if len(shape) <= _CACHED_SHAPE:
            if len(_BY_SHAPE) >= _MAX_SHAPES:
                _BY_SHAPE.clear()
            _BY_SHAPE[shape] = found
    if not found & _TEXT:
        return found
    text = view.text
    if found & _KEY_TEXT and _may_hold_key(text, shape):
        found |= _API_KEY
    if found & _JWT_TEXT and "eyJ" in text:
        found |= _JWT
    if found & _PEM_TEXT and "PRIVATE KEY-----" in text:
        found |= _PRIVATE_KEY
    if found & (_ZIP_WORD | _DOB_WORD):
        # Words as the detectors spell them; lower case here covers every spelling.
        lower = text.lower()
        if found & _ZIP_WORD and (
            "zip" in lower or "ostal" in lower or "ostcode" in lower or "ost code" in lower
        ):
            found |= _ZIP  # a postal code after "zip", "postal code", "postcode"
        if found & _DOB_WORD and (
            "irth" in lower or "born" in lower or "dob" in lower or "o.b" in lower
        ):
            found |= _DOB  # a date near a birth word
    return found & ALL


def _by_shape(shape: bytes, digits: int) -> int:
    """What ``shape`` (of a text with ``digits`` digits) allows: BITS, and the _TEXT bits of
    what only the text's letters can tell."""
    found = _EMAIL if b"@" in shape else 0
    if b"=" in shape and (b"?" in shape or b"&" in shape):
        found |= _PASSWORD | _API_KEY  # "?token=...", "&password=..." parameters
    elif b"://" in shape:
        found |= _PASSWORD  # "scheme://user:password@host"
    size = len(shape)
    if size >= 15:  # the shortest key (then JWT and PEM block)
        if not found & _API_KEY and _KEY_RUN_15 in shape.translate(_KEY_RUN):
            found |= _KEY_TEXT
        if size >= 24 and shape.count(b".") >= 2:
            found |= _JWT_TEXT  # eyJ....eyJ....
        if b"-----" in shape:
            found |= _PEM_TEXT
    if not digits:
        return found
    space_digit = b" 0" in shape
    if space_digit or b"0 " in shape or b"0a " in shape:
        found |= _STREET  # a word, a space, the number ("Suite 5"), or the number, a space
    if (digits >= 4 and _QUAD.search(shape) is not None) or (
        b"::" in shape or _IPV6_GROUPS.search(shape) is not None
    ):
        found |= _IP
    if digits < 2:
        return found
    if size >= 15 and _IBAN_START.search(shape) is not None:
        found |= _IBAN
    if (
        digits >= 7
        and shape != b"0000-00-00"  # a bare ISO date (a JSON value) is protected: no phone
        and (size > _CACHED_SHAPE or _PHONE_START.search(shape) is not None)
    ):
        found |= _PHONE
    if digits >= 9 and (b"000-00-0000" in shape or b"000 00 0000" in shape):
        found |= _SSN
    if digits >= 12 and (
        b"000000000000" in shape or b"0000 0000" in shape or b"0000-0000" in shape
    ):
        found |= _CARD  # 12-19 digits bare, or 4-digit groups (then 4 or 6), " " or "-"
    if (
        digits >= 5
        and b"00000" in shape
        and (
            b"a 00000" in shape
            or b"a, 00000" in shape
            or b"a  00000" in shape
            or b"a,  00000" in shape
        )
    ):
        found |= _ZIP  # a state, then a 5-digit ZIP code
    # A postal code's keyword ends in a letter and is followed by " ", ":", "=", "-" or "#".
    if b"a " in shape or b"a:" in shape or b"a=" in shape or b"a-" in shape or b"a#" in shape:
        found |= _ZIP_WORD
    # A date of birth has four digits ("4.5.90") and a separator or a space before a digit.
    if digits >= 4 and (space_digit or b"0-0" in shape or b"0/0" in shape or b"0.0" in shape):
        found |= _DOB_WORD
    return found

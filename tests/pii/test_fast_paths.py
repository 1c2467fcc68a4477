"""The scrubber's fast paths give the results of the slow ones they stand in for.

Each shortcut skips work that cannot change the result: the prefilter skips detectors whose
necessary condition a text lacks, short words skip detection, protected spans are found in
the window around a candidate, JSON without backslashes is split at its quotes, ASCII text is
scanned with ``re.ASCII`` twins, placeholders use HMAC-SHA256 built from hash states. These
tests hold each shortcut against the general path on generated input.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from bisect import bisect_right

from hypothesis import example, given, settings
from hypothesis import strategies as st

from storage.message import ChatKey
from storage.pii import PIIScrubber, payloads, protected
from storage.pii.keyed import KeyEntities, compile_json_keys
from storage.pii.placeholders import normalize
from storage.pii.prefilter import BITS, plain_word, possible
from storage.pii.protected import NEVER_MATCH_RES, TextView, ascii_twin
from storage.pii.scrubber import _BUILTIN

KEY = ChatKey("user", "session", "agent")
# One or more spellings that each built-in detector finds, and text that looks like them.
PIECES = [
    "4111 1111 1111 1111", "4111-1111-1111-1111", "4111111111111111", "378282246310005",
    "123-45-6789", "123 45 6789", "DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432",
    "NO9386011117947", "192.168.1.1", "::1", "fe80::1%eth0", "2001:db8:85a3:0:0:8a2e:370:7334",
    "::ffff:192.0.2.128", "+1 415 555 0147", "(212) 555-0147", "212-555-0147", "0044 20 7946 0958",
    "020 7946 0958", "ext. 123", "a@b.co", "mia.li@example.com", "sk-abcdefghijklmnopqrstuvwx",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "AKIAABCDEFGHIJKLMNOP", "xoxb-1234567890",
    "SG.abcdefghijklmnop.abcdefghijklmnopq",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abc",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----",
    "https://user:pass@host/x", "?token=abc", "&password=xyz", "born 1990-04-05",
    "DOB: 04/05/1990", "date of birth April 5, 1990", "5th of April 1990 (DOB)",
    "975 Sunset Drive, Suite 217", "12 N. Main St.", "Via Franscini 71", "Rua do Arenque 1634",
    "Koskikatu 25", "P.O. Box 242", "Apt. 864", "Flat 3,", "Unit 8505 Box 9220",
    "Austin, TX 78750", "zip 78750", "postal code SW1A 1AA", "postcode K1A 0B1", "room 12",
    "10:30", "$1,234.56", "1.234.567", "v1.2.3", "==1.2.3", "1.2.3-rc1", "order 4521",
    "WH-1000XM4", "550e8400-e29b-41d4-a716-446655440000", "2024-05-24T10:22:31Z", "2024-05-24",
    "20240524T1022Z", "12345-6789", "٣٤٥٦٧٨٩٠١٢", "<EMAIL_ADDRESS_1234abcd>",
    "call me at+14155550147",
]  # fmt: skip
GLUE = [" ", "", "\n", ", ", "; ", " and ", "-", ".", ":", "(", ")", "/", "#", "=", '"', "'"]
# With a long s (folds to "s"), an Arabic-Indic digit and a no-break space.
NOISE = st.text(alphabet="0123456789 .-:/()+#@,aAbBxX_=?&$€£\n\t\u017f\u0663\xa0", max_size=16)
PART = st.one_of(st.sampled_from(PIECES), st.sampled_from(GLUE), NOISE, st.text(max_size=4))
# Short texts too: a lone value with what is next to it (short texts take cached shortcuts).
TEXTS = st.one_of(
    st.tuples(st.sampled_from(GLUE), st.sampled_from(PIECES), st.sampled_from(GLUE)).map("".join),
    st.lists(PART, max_size=3).map("".join),
    st.lists(PART, max_size=8).map("".join),
)


@settings(max_examples=1500, deadline=None)
@given(TEXTS)
@example("/4111-1111-1111-1111 ")  # no phone can start here, a card can
@example("room 12#123-45-6789")
def test_the_prefilter_never_skips_a_detector_that_finds_something(text: str) -> None:
    mask = possible(TextView(text))
    for name, finder in _BUILTIN.items():
        if list(finder(TextView(text))):
            assert mask & BITS[name], (name, text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=16) | st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,13}", fullmatch=True))
def test_a_plain_word_holds_nothing_a_detector_finds(text: str) -> None:
    if plain_word(text):
        assert not any(list(finder(TextView(text))) for finder in _BUILTIN.values())


def _whole_text_never_match(text: str, start: int, end: int) -> bool:
    """Protected spans found in the whole text at once (what the windows stand in for)."""
    spans = [m.span() for rx in NEVER_MATCH_RES for m in rx.finditer(text)]
    for m in protected._DASHED_RE.finditer(text):
        if any(protected._mixed(part) for part in m.group().split("-")):
            spans.append(m.span())
    starts: list[int] = []
    ends: list[int] = []
    for s, e in sorted(spans):
        if starts and s <= ends[-1]:
            ends[-1] = max(ends[-1], e)
        else:
            starts.append(s)
            ends.append(e)
    i = bisect_right(starts, end - 1) - 1
    return i >= 0 and ends[i] > start


@settings(max_examples=500, deadline=None)
@given(TEXTS, st.data())
def test_protected_spans_in_a_window_are_those_of_the_whole_text(
    text: str, data: st.DataObject
) -> None:
    if not text:
        return
    view = TextView(text)
    for _ in range(8):
        start = data.draw(st.integers(0, len(text) - 1))
        end = data.draw(st.integers(start + 1, min(len(text), start + 30)))
        assert view.never_match(start, end) == _whole_text_never_match(text, start, end)


@settings(max_examples=300, deadline=None)
@given(TEXTS)
def test_ascii_twins_match_where_the_patterns_do(text: str) -> None:
    text = text.encode("ascii", "ignore").decode()
    for rx in (*NEVER_MATCH_RES, protected._DASHED_RE):
        assert [m.span() for m in ascii_twin(rx).finditer(text)] == [
            m.span() for m in rx.finditer(text)
        ]


SCALARS = st.one_of(
    st.sampled_from(PIECES),
    st.text(max_size=8),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
KEYS = st.sampled_from(["zip", "dob", "first_name", "Zip Code", "id", "x", "street", "postal"])
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=12,
)


def _changes(text: str) -> str:
    return text.upper() if len(text) % 3 == 0 else text


def _keyed(entity: str, value: str) -> str | None:
    return f"<{entity}>" if len(value) % 2 else None


@settings(max_examples=500, deadline=None)
@given(
    JSON_VALUES.filter(lambda v: isinstance(v, list | dict)),
    st.booleans(),
    st.sampled_from([None, 2]),
)
def test_json_split_at_its_quotes_is_scrubbed_as_token_by_token(
    value: object, ensure_ascii: bool, indent: int | None
) -> None:
    raw = json.dumps(value, ensure_ascii=ensure_ascii, indent=indent)
    if "\\" in raw:
        return
    outside = " ".join(raw.split('"')[0::2]).encode("ascii").translate(payloads._DIGITS_AS_0)
    if b"0000000" in outside:
        return
    keys = compile_json_keys(None)
    for words in (False, True):
        by_tokens = payloads._by_tokens(
            raw, _changes, lambda d: None, _keyed, KeyEntities(keys), words
        )
        by_quotes = payloads._by_quotes(
            raw, raw.split('"'), _changes, _keyed, KeyEntities(keys), words
        )
        assert by_quotes == by_tokens
        json.loads(by_quotes)


def test_a_placeholder_is_hmac_sha256_of_the_key_parts_and_the_value() -> None:
    for secret in (b"s", b"x" * 64, b"y" * 65, bytes(range(200))):
        scrubber = PIIScrubber(secret=secret)
        out = scrubber.scrub_text("write to Mia.Li@Example.com", KEY)
        message = "\x00".join((KEY.user_id, KEY.session_id, KEY.agent_id, ""))
        message += normalize("EMAIL_ADDRESS", "Mia.Li@Example.com")
        digest = hmac.new(secret, message.encode(), hashlib.sha256).hexdigest()
        assert out == f"write to <EMAIL_ADDRESS_{digest[:8]}>"

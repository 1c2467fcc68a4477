"""Property tests: idempotence, placeholder stability and unlinkability, no e-mail survives,
JSON payloads stay valid."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.message import ChatKey, ChatMessage, ToolCall
from storage.pii import PIIScrubber

KEY = ChatKey("user", "session", "agent")
PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9_]*_[0-9a-f]{8}>")
EMAILISH = re.compile(r"[^@\s]+@[^@\s]+\.[A-Za-z]{2,}")
KNOWN = {"PERSON": ["Mia Li", "Li"], "USER_ID": ["mia_li_3668"]}

REDACT = PIIScrubber(secret="properties", known_values=KNOWN)
MASK = PIIScrubber(secret="properties", known_values=KNOWN, mode="mask")

SAMPLES = [
    "mia.li3818@example.com",
    "+44 20 7946 0958",
    "(555) 010-4477",
    "555.010.4477",
    "4111 1111 1111 1111",
    "4030874397740603788",
    "GB82 WEST 1234 5698 7654 32",
    "123-45-6789",
    "10.0.0.1",
    "2001:db8::1",
    "2024-05-15T15:00:00Z",
    "123e4567-e89b-12d3-a456-426614174000",
    "call_abc123",
    "sk-proj-abcdefghijklmnopqrstuvwxyz123456",
    "postgres://u:pw@h/db",
    "Mia Li",
    "mia_li_3668",
    "<EMAIL_ADDRESS_0123abcd>",
]
SEPARATORS = [" ", ", ", "\n", "; ", " <", "> ", "-", ".", ":", "/", "@", "+", "(", ")", "x"]
NOISY = st.text(alphabet="0123456789 -.@()+:/_<>abcxyzLiMA#=", max_size=12)
TEXTS = st.lists(
    st.one_of(st.sampled_from(SAMPLES), st.sampled_from(SEPARATORS), NOISY, st.text(max_size=6)),
    max_size=12,
).map("".join)
KEYS = st.builds(
    ChatKey,
    st.text(min_size=1, max_size=8).filter(lambda s: "\x00" not in s),
    st.text(min_size=1, max_size=8).filter(lambda s: "\x00" not in s),
    st.text(min_size=1, max_size=8).filter(lambda s: "\x00" not in s),
)


@settings(max_examples=400, deadline=None)
@given(TEXTS)
def test_idempotent_redact(text: str) -> None:
    once = REDACT.scrub_text(text, KEY)
    assert REDACT.scrub_text(once, KEY) == once


@settings(max_examples=200, deadline=None)
@given(TEXTS)
def test_idempotent_mask(text: str) -> None:
    once = MASK.scrub_text(text, KEY)
    assert MASK.scrub_text(once, KEY) == once


@settings(max_examples=300, deadline=None)
@given(TEXTS)
def test_text_around_placeholders_is_kept(text: str) -> None:
    out = REDACT.scrub_text(text, KEY)
    # The output is the input with some non-empty spans replaced by placeholders.
    kept = PLACEHOLDER.split(out)
    assert re.fullmatch("(?s)" + ".+?".join(re.escape(piece) for piece in kept), text)
    first = REDACT.detect(text)
    assert len(PLACEHOLDER.findall(out)) >= len(first) + len(PLACEHOLDER.findall(text))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(SAMPLES[:10]), TEXTS, TEXTS, KEYS, KEYS)
def test_placeholders_stable_within_a_key_and_differ_across_keys(
    value: str, left: str, right: str, key: ChatKey, other: ChatKey
) -> None:
    alone = PLACEHOLDER.findall(REDACT.scrub_text(f"x {value} x", key))
    assert len(alone) == 1
    in_context = REDACT.scrub_text(f"{left} | {value} | {right}", key)
    assert alone[0] in in_context
    if other != key:
        assert PLACEHOLDER.findall(REDACT.scrub_text(f"x {value} x", other)) != alone


def test_stray_digit_before_a_phone_number() -> None:
    assert PLACEHOLDER.fullmatch(REDACT.scrub_text("0 (555) 010-4477", KEY).split(" ", 1)[1])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.emails(), st.sampled_from([" ", ", ", "\n", "; ", " <", "> ", "|", "\t"])),
        min_size=1,
        max_size=4,
    ),
    st.text(max_size=20),
)
def test_no_input_email_survives(emails: list[tuple[str, str]], filler: str) -> None:
    text = filler + " " + "".join(email + sep for email, sep in emails) + filler
    out = REDACT.scrub_text(text, KEY)
    for email, _ in emails:
        assert email not in out


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=8),
        st.one_of(
            st.text(max_size=10),
            st.emails(),
            st.sampled_from(SAMPLES),
            st.integers(),
            st.lists(st.one_of(st.emails(), st.text(max_size=5)), max_size=3),
        ),
        max_size=6,
    )
)
def test_json_arguments_stay_valid_with_same_keys(payload: dict[str, object]) -> None:
    arguments = json.dumps(payload)
    call = ToolCall("call_1", "fn", arguments)
    out = REDACT(ChatMessage("assistant", None, (call,)), KEY)
    new = out.tool_calls[0].arguments
    parsed = json.loads(new)
    assert list(parsed) == list(payload)
    for value in payload.values():
        if isinstance(value, str) and EMAILISH.fullmatch(value):
            assert json.dumps(value)[1:-1] not in new
    assert REDACT(out, KEY) is out  # scrubbing again changes nothing


@pytest.mark.parametrize("mode", ["redact", "mask"])
def test_scrubbed_sample_is_a_fixed_point(mode: str) -> None:
    scrubber = REDACT if mode == "redact" else MASK
    text = " | ".join(SAMPLES)
    once = scrubber.scrub_text(text, KEY)
    assert once != text
    assert scrubber.scrub_text(once, KEY) == once

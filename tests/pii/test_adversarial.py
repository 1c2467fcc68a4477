"""Bounded time: 1 MB adversarial inputs finish (linear-time matching, no catastrophic
backtracking). Only completion and the result are asserted; timings live in benchmarks/.

Inputs dense with real detections (every few characters a phone number or an IP) are 250 kB:
they test that bulk replacement stays correct, and each detection costs a keyed hash."""

from __future__ import annotations

import json

import pytest

from storage.message import ChatKey, ChatMessage, ToolCall
from storage.pii import PIIScrubber

MB = 1_000_000
KEY = ChatKey("u", "s", "a")


@pytest.fixture(scope="module")
def scrubber() -> PIIScrubber:
    return PIIScrubber(secret="adversarial", known_values={"PERSON": ["Mia Li", "a a a"]})


def repeat(unit: str, size: int = MB) -> str:
    return unit * (size // len(unit))


# Inputs in which nothing is PII: the output must be the input itself.
NOTHING = {
    "a@ repeated": repeat("a@"),
    "200k digits": "7" * 200_000,
    "1 MB digits": "4" * MB,
    "1- repeated": repeat("1-"),
    "long dotted run": repeat("1."),
    "dotted words": repeat("a."),
    "one long word": "a" * MB,
    "dashed words": repeat("a-"),
    "colons": repeat("1:"),
    "hex and colons": repeat("ab:"),
    "a@b. repeated": repeat("a@b."),
    "open parentheses": repeat("(1"),
    "pluses": repeat("+"),
    "PEM headers without dashes": repeat("-----BEGIN PRIVATE KEY "),
    "url schemes": repeat("://"),
    "jwt prefixes": repeat("eyJ."),
    "key prefixes": repeat("ghp_"),
    "iban prefixes": repeat("GB82"),
    "spaces": " " * MB,
    "percent-quoted": repeat("%@%"),
}


@pytest.mark.parametrize("name", list(NOTHING))
def test_adversarial_input_without_pii_finishes_unchanged(scrubber: PIIScrubber, name: str) -> None:
    text = NOTHING[name]
    assert len(text) >= 199_000
    assert scrubber.scrub_text(text, KEY) == text


def test_long_local_part_before_one_at(scrubber: PIIScrubber) -> None:
    out = scrubber.scrub_text("a" * MB + "@example.com", KEY)
    assert out.startswith("<EMAIL_ADDRESS_")
    assert out.endswith(">")
    assert len(out) < 40


def test_endless_private_key_body(scrubber: PIIScrubber) -> None:
    out = scrubber.scrub_text("-----BEGIN PRIVATE KEY-----\n" + "A" * MB, KEY)
    assert out.startswith("<PRIVATE_KEY_")
    assert out.endswith(">")
    assert len(out) < 30


def test_endless_key_body(scrubber: PIIScrubber) -> None:
    out = scrubber.scrub_text(repeat("sk-"), KEY)
    assert out.startswith("<API_KEY_")
    assert out.endswith(">")
    assert len(out) < 30


def test_many_spaced_digit_groups(scrubber: PIIScrubber) -> None:
    text = repeat("1 ")
    out = scrubber.scrub_text(text, KEY)
    assert "<" not in out  # single-digit groups are not phone numbers


def test_many_phone_numbers(scrubber: PIIScrubber) -> None:
    text = repeat("555-010-4477 ", MB // 4)
    out = scrubber.scrub_text(text, KEY)
    assert "4477" not in out
    assert out.count("<PHONE_NUMBER_") == text.count("4477")


def test_many_ip_addresses(scrubber: PIIScrubber) -> None:
    text = repeat("10.0.0.1 ", MB // 4)
    out = scrubber.scrub_text(text, KEY)
    assert out.count("<IP_ADDRESS_") == text.count("10.0.0.1")


def test_many_iso_timestamps(scrubber: PIIScrubber) -> None:
    text = repeat("2024-01-01 10:00:00 ", MB // 4)
    assert scrubber.scrub_text(text, KEY) == text


def test_many_known_value_fragments(scrubber: PIIScrubber) -> None:
    text = repeat("a ", MB // 4)
    out = scrubber.scrub_text(text, KEY)
    assert out.count("<PERSON_") == text.count("a ") // 3


def test_huge_json_tool_result(scrubber: PIIScrubber) -> None:
    payload = json.dumps({"notes": repeat("x@y "), "emails": ["mia@example.com"] * 20_000})
    message = ChatMessage("tool", payload, tool_call_id="call_1")
    out = scrubber(message, KEY)
    assert isinstance(out.content, str)
    parsed = json.loads(out.content)
    assert parsed["notes"] == repeat("x@y ")
    assert "mia@example.com" not in out.content
    assert len(parsed["emails"]) == 20_000


def test_huge_tool_call_arguments(scrubber: PIIScrubber) -> None:
    arguments = json.dumps({"blob": repeat("1-2.3 ")})
    message = ChatMessage("assistant", None, (ToolCall("call_1", "f", arguments),))
    assert scrubber(message, KEY) is message

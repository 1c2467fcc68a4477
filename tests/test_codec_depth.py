"""The codec under nesting: what validation allows decodes; anything deeper is corrupt data."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from storage.codec import decode, encode
from storage.errors import CorruptRecordError
from storage.history import validate_message
from storage.message import MAX_DEPTH, ChatMessage


def test_deepest_valid_message_round_trips_through_the_codec() -> None:
    value: object = "leaf"
    for _ in range(MAX_DEPTH - 1):
        value = [value]
    message = validate_message(
        ChatMessage("user", [{"x": value}], created_at=datetime(2026, 1, 1, tzinfo=UTC))
    )
    assert decode(encode(message)) == message


def test_record_nested_past_what_json_can_parse_is_corrupt_not_recursion_error() -> None:
    deep = "[" * 200_000 + "]" * 200_000
    record = '{"v":1,"id":"x","at":"2026-01-01T00:00:00+00:00","m":{"role":"user","content":%s}}'
    with pytest.raises(CorruptRecordError, match="cannot decode stored record"):
        decode(record % deep)
    assert json.loads(record % "[[]]")["m"]["content"] == [[]]

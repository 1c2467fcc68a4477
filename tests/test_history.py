"""validate_history: one test per rule; safe_window and turns."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from storage.errors import InvalidMessageError
from storage.history import (
    last_turns_start,
    safe_window,
    split_turns,
    validate_history,
    validate_message,
)
from storage.message import ChatMessage, ToolCall

DATA = Path(__file__).resolve().parents[1] / "examples" / "data"


def call(cid: str) -> dict[str, object]:
    return {"id": cid, "type": "function", "function": {"name": "f", "arguments": "{}"}}


def test_not_a_list() -> None:
    with pytest.raises(InvalidMessageError, match="must be a list"):
        validate_history({"role": "user", "content": "x"})
    with pytest.raises(InvalidMessageError, match="must be a list"):
        validate_history("hello")


def test_element_not_message_names_index() -> None:
    with pytest.raises(
        InvalidMessageError,
        match="message 1: expected a ChatMessage or an OpenAI message dict, got int",
    ):
        validate_history([{"role": "user", "content": "x"}, 5])


def test_unknown_role_names_index_and_role() -> None:
    with pytest.raises(InvalidMessageError, match="message 2: unknown role 'bot'"):
        validate_history(
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"},
                {"role": "bot", "content": "c"},
            ]
        )


def test_orphaned_tool_result() -> None:
    with pytest.raises(InvalidMessageError, match="message 1: tool result 'x' has no preceding"):
        validate_history(
            [
                {"role": "user", "content": "a"},
                {"role": "tool", "tool_call_id": "x", "content": "r"},
            ]
        )
    with pytest.raises(InvalidMessageError, match="message 2: tool result 'c2' matches no call"):
        validate_history(
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
                {"role": "tool", "tool_call_id": "c2", "content": "r"},
            ]
        )


def test_tool_results_pair_with_nearest_turn_not_global_id() -> None:
    # the same id reused in two turns (as in real data) is fine ...
    history = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": None, "tool_calls": [call("dup")]},
        {"role": "tool", "tool_call_id": "dup", "content": "r1"},
        {"role": "assistant", "content": None, "tool_calls": [call("other")]},
        {"role": "tool", "tool_call_id": "other", "content": "r2"},
        {"role": "assistant", "content": None, "tool_calls": [call("dup")]},
        {"role": "tool", "tool_call_id": "dup", "content": "r3"},
    ]
    assert len(validate_history(history)) == 7
    # ... but a result answering an older turn's call, not the nearest one's, is refused
    history[4] = {"role": "tool", "tool_call_id": "dup", "content": "r2"}
    with pytest.raises(InvalidMessageError, match="message 4: tool result 'dup' matches no call"):
        validate_history(history)


def test_system_only_first() -> None:
    assert validate_history([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
    with pytest.raises(
        InvalidMessageError, match="message 1: a system message is only allowed first"
    ):
        validate_history([{"role": "user", "content": "u"}, {"role": "system", "content": "s"}])


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ({"role": "user", "content": 5}, "message 0: content must be"),
        ({"role": "user", "content": [1]}, "message 0: content part 0 must be a mapping"),
        ({"role": "user", "content": "x", "name": 3}, "message 0: name must be a str"),
        ({"role": "tool", "content": "x"}, "message 0: a tool message needs a tool_call_id"),
        (
            {"role": "assistant", "content": None, "tool_calls": "nope"},
            "message 0: 'tool_calls' must be a list",
        ),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": 1, "function": {"name": "f", "arguments": "{}"}}],
            },
            r"message 0: tool_calls\[0\].id must be a str",
        ),
        (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "1", "function": {"name": "f", "arguments": {"a": 1}}}],
            },
            r"tool_calls\[0\].arguments must be a str",
        ),
        ({"role": 7, "content": "x"}, "message 0: unknown role 7"),
    ],
)
def test_wrong_field_types(bad: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidMessageError, match=match):
        validate_history([bad])


def test_real_histories_validate() -> None:
    for path in DATA.glob("*.openai.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            conversation = json.loads(line)
            assert len(validate_history(conversation["messages"])) == len(conversation["messages"])


def test_accepts_chat_messages() -> None:
    messages = [ChatMessage("user", "a"), ChatMessage("assistant", "b")]
    assert validate_history(messages) == messages


def test_safe_window_and_turns() -> None:
    m = [
        ChatMessage("system", "s"),
        ChatMessage("user", "u1"),
        ChatMessage("assistant", None, (ToolCall("c", "f", "{}"),)),
        ChatMessage("tool", "r", tool_call_id="c"),
        ChatMessage("assistant", "a1"),
        ChatMessage("user", "u2"),
    ]
    assert safe_window(m, 3) == m[4:]
    assert safe_window(m, 4) == m[2:]
    assert safe_window(m, None) == m
    assert safe_window(m, None) is not m
    prefix, turns = split_turns(m)
    assert prefix == m[:1]
    assert turns == [m[1:5], m[5:]]
    assert last_turns_start(m, 1) == 5
    assert last_turns_start(m, 2) == 1
    assert last_turns_start(m, 3) == 0
    assert last_turns_start(m, 0) == 6


# --- developer role and the leading system policy -----------------------------------------


def test_developer_role_is_accepted_first_like_system() -> None:
    history = validate_history(
        [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    )
    assert [m.role for m in history] == ["developer", "user"]


@pytest.mark.parametrize("role", ["system", "developer"])
def test_developer_or_system_after_the_first_message_is_refused(role: str) -> None:
    with pytest.raises(
        InvalidMessageError, match=f"message 1: a {role} message is only allowed first"
    ):
        validate_history([{"role": "user", "content": "a"}, {"role": role, "content": "b"}])


@pytest.mark.parametrize("role", ["system", "developer"])
def test_system_strip_drops_the_leading_instructions(role: str) -> None:
    raw = [
        {"role": role, "content": "You are an airline agent."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    kept = validate_history(raw)
    stripped = validate_history(raw, system="strip")
    assert [m.role for m in kept] == [role, "user", "assistant"]
    assert [m.to_openai() for m in stripped] == raw[1:]
    assert [m.to_openai() for m in validate_history(raw, system="keep")] == raw


def test_system_strip_without_a_leading_system_message_changes_nothing() -> None:
    raw = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert [m.to_openai() for m in validate_history(raw, system="strip")] == raw
    assert validate_history([], system="strip") == []


def test_system_strip_still_refuses_a_non_leading_system_message() -> None:
    raw = [
        {"role": "system", "content": "a"},
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "b"},
    ]
    with pytest.raises(InvalidMessageError, match="message 2: a system message"):
        validate_history(raw, system="strip")


def test_system_policy_must_be_a_known_one() -> None:
    from storage.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="system must be 'keep', 'strip' or 'anywhere'"):
        validate_history([], system="drop")  # type: ignore[arg-type]


def test_anywhere_accepts_instruction_messages_mid_record() -> None:
    record = [
        ChatMessage("user", "hi"),
        ChatMessage("developer", "new instructions"),
        ChatMessage("system", "more"),
    ]
    assert validate_history(record, system="anywhere") == record
    with pytest.raises(InvalidMessageError, match="only allowed first"):
        validate_history(record)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_refused_naming_the_field(bad: float) -> None:
    with pytest.raises(InvalidMessageError, match=r"metadata\['n'\]"):
        validate_message(ChatMessage("user", "x", metadata={"n": bad}))
    with pytest.raises(InvalidMessageError, match="JSON cannot represent"):
        validate_message(ChatMessage("user", ({"type": "text", "text": "x", "w": [1.0, bad]},)))

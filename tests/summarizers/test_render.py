"""The shared summarizer pieces (summarizers/render.py), and history builders the other
summarizer test modules import."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import strategies as st

from storage.history import validate_history
from storage.message import ChatMessage, ToolCall
from summarizers.render import (
    SUMMARY_HEADING,
    build_result,
    content_text,
    first_sentence,
    plan_summary,
    render_message,
    short_arguments,
    shorten,
)

SYSTEM = "You are the airline agent. Follow the policy."


def user(text: str | None) -> ChatMessage:
    return ChatMessage("user", text)


def assistant(text: str | None, *calls: ToolCall) -> ChatMessage:
    return ChatMessage("assistant", text, calls)


def tool(call: ToolCall, text: str | None) -> ChatMessage:
    return ChatMessage("tool", text, tool_call_id=call.id, name=call.name)


def call(name: str, n: int = 0, **args: Any) -> ToolCall:
    return ToolCall(f"call_{n}", name, json.dumps(args))


def tool_turn(tag: str) -> list[ChatMessage]:
    """A turn with one tool call (content None) and its result; every text holds ``tag``."""
    c = call("get_user_details", user_id=f"uid_{tag}")
    return [
        user(f"Request {tag}. More words here."),
        assistant(None, c),
        tool(c, f'{{"user": "{tag}"}}'),
        assistant(f"Answer {tag}. Details follow."),
    ]


def text_turn(tag: str) -> list[ChatMessage]:
    return [user(f"Question {tag}?"), assistant(f"Reply {tag}.")]


def history(*turns: list[ChatMessage], system: str | None = SYSTEM) -> list[ChatMessage]:
    head = [ChatMessage("system", system)] if system else []
    return head + [m for turn in turns for m in turn]


# --- hypothesis: random valid histories -------------------------------------------------

_text = st.one_of(st.none(), st.text(max_size=40))


@st.composite
def turns(draw: st.DrawFn) -> list[ChatMessage]:
    """One turn: a user message, then text answers and tool-call rounds in any order."""
    out = [ChatMessage("user", draw(st.one_of(st.text(max_size=40), st.none())))]
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            n = draw(st.integers(1, 3))
            # Real data reuses call ids across turns: so do we.
            calls = [
                ToolCall(
                    f"call_{i}",
                    draw(st.sampled_from(["search", "book", "think"])),
                    draw(st.sampled_from(["{}", '{"a": 1}', "not json", '{"q": "x\\ny"}'])),
                )
                for i in range(n)
            ]
            out.append(ChatMessage("assistant", draw(_text), calls))
            out.extend(ChatMessage("tool", draw(_text), tool_call_id=c.id) for c in calls)
        else:
            out.append(ChatMessage("assistant", draw(_text)))
    return out


@st.composite
def buffers(draw: st.DrawFn) -> list[ChatMessage]:
    """A buffer: optional prior summary or system prompt, optional prefix, random turns."""
    head: list[ChatMessage] = []
    first = draw(st.sampled_from(["none", "system", "summary"]))
    if first == "system":
        head.append(ChatMessage("system", draw(st.text(max_size=30))))
    elif first == "summary":
        head.append(
            ChatMessage(
                "system",
                f"{SUMMARY_HEADING}\n" + draw(st.text(max_size=60)),
                metadata={"chatlayers": {"summary": True, "summarized": draw(st.integers(0, 9))}},
            )
        )
    if draw(st.booleans()):
        head.append(ChatMessage("assistant", "Hello, how can I help?"))
    body = [m for t in draw(st.lists(turns(), max_size=7)) for m in t]
    return head + body


def expected_tail(buffer: Sequence[ChatMessage], keep_last: int) -> list[ChatMessage] | None:
    """Reference: the last keep_last turns, or None when there is nothing to summarize."""
    users = [i for i, m in enumerate(buffer) if m.role == "user"]
    if keep_last == 0:  # everything after the prior summary or system prompt is summarized
        head = 1 if buffer and (buffer[0].is_summary or buffer[0].role == "system") else 0
        return [] if buffer[head:] else None
    if len(users) <= keep_last:
        return None
    return list(buffer[users[-keep_last] :]) if keep_last else []


def check_result(buffer: list[ChatMessage], result: list[ChatMessage], keep_last: int) -> None:
    """The rules every ready summarizer must meet: the buffer back unchanged when there is
    nothing to summarize, else one summary, then the kept tail verbatim, a valid history."""
    tail = expected_tail(buffer, keep_last)
    if tail is None:
        assert result == buffer
        return
    assert result[0].is_summary
    assert all(a is b for a, b in zip(result[1:], tail, strict=True))  # verbatim, same objects
    validate_history(result)  # roles valid, no orphan tool message, system only first
    assert not any(m.is_summary for m in result[1:])


# --- tests ----------------------------------------------------------------------------------


def test_plan_splits_prior_summary_unsummarized_and_kept_turns() -> None:
    old, new1, new2, kept1, kept2 = (tool_turn(t) for t in "ABCDE")
    prior = build_result(
        plan_summary(history(old, new1), 1),  # type: ignore[arg-type]
        "- line about A",
        role="system",
        summarizer="test",
    )[0]
    buffer = [prior, *new1, *new2, *kept1, *kept2]
    plan = plan_summary(buffer, 2)
    assert plan is not None
    assert plan.system_prompt == SYSTEM
    assert plan.prior_text == "- line about A"
    assert plan.prior_count == len(old)
    assert list(plan.to_summarize) == new1 + new2
    assert list(plan.kept) == kept1 + kept2


def test_plan_is_none_when_at_most_keep_last_turns() -> None:
    assert plan_summary(history(tool_turn("A"), tool_turn("B")), 2) is None
    assert plan_summary([], 2) is None
    assert plan_summary([ChatMessage("system", "x")], 0) is None
    assert plan_summary(history(tool_turn("A")), 0) is not None


def test_plan_keep_last_zero_summarizes_everything() -> None:
    plan = plan_summary(history(tool_turn("A"), text_turn("B")), 0)
    assert plan is not None
    assert plan.kept == ()
    assert len(plan.to_summarize) == 6


def test_plan_refuses_negative_keep_last() -> None:
    with pytest.raises(ValueError, match="keep_last"):
        plan_summary(history(tool_turn("A")), -1)


def test_foreign_prior_summary_is_read_as_a_body() -> None:
    foreign = ChatMessage(
        "system", "They talked about cats.", metadata={"chatlayers": {"summary": True}}
    )
    plan = plan_summary([foreign, *text_turn("A"), *text_turn("B")], 1)
    assert plan is not None
    assert (plan.system_prompt, plan.prior_text, plan.prior_count) == (
        "",
        "They talked about cats.",
        0,
    )


def test_build_result_keeps_system_prompt_and_records_what_it_covers() -> None:
    ts = datetime(2024, 5, 1, tzinfo=UTC)
    a = [user("a"), ChatMessage("assistant", "b", created_at=ts)]
    plan = plan_summary(history(a, text_turn("B")), 1)
    assert plan is not None
    result = build_result(plan, "BODY", role="user", summarizer="x", extra={"model": "m"})
    summary = result[0]
    assert summary.role == "user"
    assert summary.text == f"{SYSTEM}\n\nBODY"
    meta = dict(summary.metadata["chatlayers"])
    sources = meta.pop("sources")
    assert meta == {
        "summary": True,
        "summarizer": "x",
        "summarized": 2,
        "last_id": a[-1].id,
        "system_chars": len(SYSTEM),
        "model": "m",
    }
    assert list(sources["covers"]) == [m.id for m in a]
    assert dict(sources["facts"]) == {}
    assert summary.created_at == ts
    # The next round splits the system prompt off again, exactly.
    again = plan_summary([summary, *text_turn("C"), *text_turn("D")], 1)
    assert again is not None
    assert (again.system_prompt, again.prior_text, again.prior_count) == (SYSTEM, "BODY", 2)
    assert again.prior_id == summary.id
    # A later summary covers the prior's messages too, oldest first.
    later = build_result(again, "BODY 2", role="user", summarizer="x", facts={"A1": a[0].id})
    later_sources = later[0].metadata["chatlayers"]["sources"]
    assert list(later_sources["covers"]) == [
        *(m.id for m in a),
        *(m.id for m in again.to_summarize),
    ]
    assert dict(later_sources["facts"]) == {"A1": a[0].id}


def test_render_message_tool_calls_none_content_and_parts() -> None:
    c = ToolCall("id1", "book", '{"flight": "HAT1"}')
    assert render_message(assistant(None, c)) == 'Assistant called book({"flight": "HAT1"})'
    assert (
        render_message(assistant("Sure.", c))
        == 'Assistant: Sure.\nAssistant called book({"flight": "HAT1"})'
    )
    assert render_message(assistant(None)) == "Assistant: (no content)"
    assert render_message(tool(c, None)) == "Tool result of book: (no content)"
    assert (
        render_message(ChatMessage("tool", "ok", tool_call_id="id1"))
        == "Tool result of call id1: ok"
    )
    parts = ChatMessage(
        "user", [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {}}]
    )
    assert render_message(parts) == "User: look\n[image_url]"
    assert render_message(ChatMessage("user", "hi", name="ada")) == "User (ada): hi"
    assert content_text(ChatMessage("user", None)) == ""


def test_short_arguments_handles_json_objects_and_anything_else() -> None:
    assert short_arguments(ToolCall("i", "f", '{"a": "x y", "b": [1, 2]}'), 60) == "a=x y, b=[1, 2]"
    assert short_arguments(ToolCall("i", "f", "not json {"), 60) == "not json {"
    assert short_arguments(ToolCall("i", "f", "[" * 100_000), 10) == "[[[[[[[[[…"
    assert len(short_arguments(ToolCall("i", "f", json.dumps({"k": "v" * 500})), 60)) == 60


def test_first_sentence_and_shorten() -> None:
    assert first_sentence("Hi! I need to change my flight to Houston. Thanks.", 100) == (
        "Hi! I need to change my flight to Houston."
    )
    assert (
        first_sentence("Here are the details:\n- one\n- two", 100)
        == "Here are the details: - one - two"
    )
    assert first_sentence("   ", 10) == ""
    assert shorten("a  b\n\nc", 10) == "a b c"
    assert shorten("x" * 20, 10) == "x" * 9 + "…"

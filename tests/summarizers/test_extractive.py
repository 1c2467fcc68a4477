"""ExtractiveSummarizer (DESIGN §6): offline, deterministic, turns kept verbatim."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.errors import ConfigError
from storage.history import validate_history
from storage.message import ChatMessage, ToolCall
from summarizers import ExtractiveSummarizer
from summarizers.extractive import OMITTED
from summarizers.render import SUMMARY_HEADING
from tests.paths import REPO
from tests.summarizers.test_render import (
    SYSTEM,
    assistant,
    buffers,
    check_result,
    expected_tail,
    history,
    text_turn,
    tool,
    tool_turn,
    user,
)

DATA = REPO / "examples" / "data"


def body(summary: ChatMessage) -> str:
    return summary.text.split(f"{SUMMARY_HEADING}\n", 1)[1]


@pytest.mark.anyio
async def test_one_line_per_summarized_turn_and_kept_turns_verbatim() -> None:
    buffer = history(tool_turn("A"), text_turn("B"), tool_turn("C"), text_turn("D"))
    result = await ExtractiveSummarizer()(buffer, 2)
    assert result[1:] == buffer[-6:]
    summary = result[0]
    assert summary.role == "system"
    assert summary.text.startswith(SYSTEM + "\n\n")
    assert body(summary).splitlines() == [
        "- user: Request A. More words here.",
        '- tool: get_user_details(user_id=uid_A) -> {"user": "A"}',
        "- assistant: Answer A. Details follow.",
        "- user: Question B?",
        "- assistant: Reply B.",
    ]
    meta = summary.metadata["chatlayers"]
    assert meta["summary"] is True
    assert meta["summarizer"] == "extractive"
    assert meta["summarized"] == 6
    assert meta["last_id"] == buffer[6].id


@pytest.mark.anyio
async def test_second_round_keeps_prior_lines_and_adds_only_new_turns() -> None:
    summarize = ExtractiveSummarizer()
    first = await summarize(history(text_turn("A"), text_turn("B"), text_turn("C")), 1)
    second = await summarize([*first, *text_turn("D"), *text_turn("E")], 1)
    assert [line for line in body(second[0]).splitlines() if line.startswith("- user")] == [
        "- user: Question A?",
        "- user: Question B?",
        "- user: Question C?",
        "- user: Question D?",
    ]
    assert second[0].text.startswith(SYSTEM + "\n\n")  # the system prompt survives rounds
    assert second[0].metadata["chatlayers"]["summarized"] == 8
    assert [m.text for m in second[1:]] == ["Question E?", "Reply E."]


@pytest.mark.anyio
async def test_nothing_to_summarize_returns_the_buffer_unchanged() -> None:
    buffer = history(tool_turn("A"), text_turn("B"))
    result = await ExtractiveSummarizer()(buffer, 2)
    assert result == buffer
    assert result is not buffer


@pytest.mark.anyio
async def test_none_content_many_calls_and_bad_arguments_render_safely() -> None:
    calls = [
        ToolCall(f"c{i}", "search", "{broken" if i == 0 else json.dumps({"n": i})) for i in range(6)
    ]
    turn = [user(None), assistant(None, *calls), *(tool(c, None) for c in calls), assistant(None)]
    result = await ExtractiveSummarizer()(history(turn, text_turn("B"), system=None), 1)
    assert body(result[0]).splitlines() == [
        "- user: (no content)",
        "- tool: search({broken) -> (no result)",
        *(f"- tool: search(n={n}) -> (no result)" for n in range(1, 6)),
    ]


@pytest.mark.anyio
async def test_body_is_bounded_by_dropping_the_oldest_lines() -> None:
    summarize = ExtractiveSummarizer(max_chars=300)
    buffer = history(*(text_turn(f"{i:02d} " + "x" * 40) for i in range(20)))
    result = await summarize(buffer, 2)
    text = body(result[0])
    assert len(text) <= 300
    lines = text.splitlines()
    assert lines[0] == OMITTED
    assert lines[-1].startswith("- user: Question 17")  # newest summarized turn kept
    again = await summarize([*result, *text_turn("new")], 2)
    assert body(again[0]).count(OMITTED) == 1
    assert len(body(again[0])) <= 300


@pytest.mark.anyio
async def test_a_single_huge_line_is_cut_to_max_chars() -> None:
    summarize = ExtractiveSummarizer(max_chars=100, sentence_chars=500)
    buffer = history([user("y" * 1000), assistant("ok")], text_turn("B"), system=None)
    result = await summarize(buffer, 1)
    assert len(body(result[0])) == 100


def test_bad_arguments_raise_config_error() -> None:
    with pytest.raises(ConfigError, match="max_chars"):
        ExtractiveSummarizer(max_chars=10)
    with pytest.raises(ConfigError, match="sentence_chars"):
        ExtractiveSummarizer(sentence_chars=0)
    with pytest.raises(ConfigError, match="summary_role"):
        ExtractiveSummarizer(summary_role="tool")


@pytest.mark.anyio
async def test_summary_role_is_configurable() -> None:
    result = await ExtractiveSummarizer(summary_role="user")(
        history(*(text_turn(t) for t in "ABC")), 1
    )
    assert result[0].role == "user"
    assert result[0].is_summary


@pytest.mark.anyio
async def test_real_tau_bench_conversations() -> None:
    summarize = ExtractiveSummarizer()
    lines = (DATA / "tau_bench_airline_gpt4o_trial0.openai.jsonl").read_text().splitlines()
    for line in lines:
        raw = validate_history(json.loads(line)["messages"])
        buffer: list[ChatMessage] = []
        for message in raw:  # feed like the layer does: summarize whenever over 20 messages
            buffer.append(message)
            if len(buffer) > 20:
                result = await summarize(buffer, 2)
                check_result(buffer, result, 2)
                buffer = result
        assert buffer[0].text.startswith(raw[0].text)  # the airline policy is never lost
        if buffer[0].is_summary:
            assert len(body(buffer[0])) <= 2000


@settings(max_examples=200, deadline=None)
@given(buffer=buffers(), keep_last=st.integers(0, 4), max_chars=st.integers(100, 600))
@pytest.mark.anyio
async def test_property_turns_verbatim_no_orphans_summary_first_deterministic(
    buffer: list[ChatMessage], keep_last: int, max_chars: int
) -> None:
    summarize = ExtractiveSummarizer(max_chars=max_chars)
    result = await summarize(list(buffer), keep_last)
    check_result(buffer, result, keep_last)
    again = await summarize(list(buffer), keep_last)
    assert again == result  # deterministic, the summary's id included
    if expected_tail(buffer, keep_last) is not None:
        assert len(body(result[0])) <= max_chars


# --- issue 13.6: what an agent needs to carry on -------------------------------------------

SUPPORT_CHAT = [
    user("Hi! I'm <EMAIL_ADDRESS_3f9a2c1d>, <PHONE_NUMBER_0123abcd>. What's the weather in Paris?"),
    assistant(None, ToolCall("c1", "get_weather", '{"city": "Paris"}')),
    ChatMessage("tool", "18 C and sunny", tool_call_id="c1", name="get_weather"),
    assistant("It is 18 C and sunny in Paris. Anything else?"),
]


@pytest.mark.parametrize(
    ("text", "request_"),
    [
        (
            "Hi! I'm <EMAIL_ADDRESS_3f9a2c1d>, <PHONE_NUMBER_0123abcd>. "
            "What's the weather in Paris?",
            "What's the weather in Paris?",
        ),
        ("Hello there. My name is Ana. Can you book a table for two?", "Can you book a table"),
        ("Good morning! I need to cancel reservation ABC123.", "I need to cancel reservation"),
        ("Thanks", "Thanks"),
        ("The flight was late. It landed at 9.", "The flight was late. It landed at 9."),
    ],
)
def test_request_text_keeps_the_request_not_the_greeting(text: str, request_: str) -> None:
    from summarizers.extractive import request_text

    assert request_text(text, 160).startswith(request_)


@pytest.mark.anyio
async def test_support_chat_keeps_question_tool_outcome_and_placeholder_facts() -> None:
    buffer = [*SUPPORT_CHAT, *text_turn("B")]
    result = await ExtractiveSummarizer()(buffer, 1)
    lines = body(result[0]).splitlines()
    assert lines == [
        "- user: What's the weather in Paris?",
        "- tool: get_weather(city=Paris) -> 18 C and sunny",
        "- assistant: It is 18 C and sunny in Paris. Anything else?",
        "- facts: the user's email address <EMAIL_ADDRESS_3f9a2c1d>; "
        "the user's phone number <PHONE_NUMBER_0123abcd>",
    ]
    assert "I'm" not in result[0].text  # the introduction itself is not a request


@pytest.mark.anyio
async def test_facts_survive_later_rounds_once_each() -> None:
    summarize = ExtractiveSummarizer()
    first = await summarize([*SUPPORT_CHAT, *text_turn("B")], 1)
    later = [
        user("Also <EMAIL_ADDRESS_3f9a2c1d> again and <IBAN_CODE_89abcdef>. Which bank?"),
        assistant("Noted."),
    ]
    second = await summarize([*first, *later, *text_turn("C")], 1)
    facts = [line for line in body(second[0]).splitlines() if line.startswith("- facts:")]
    assert len(facts) == 1
    assert facts[0].count("<EMAIL_ADDRESS_3f9a2c1d>") == 1
    assert "<IBAN_CODE_89abcdef>" in facts[0]
    assert "- user: Which bank?" in body(second[0]).splitlines()


@pytest.mark.anyio
async def test_budget_cuts_tool_lines_before_requests() -> None:
    calls = [ToolCall(f"c{i}", "run", json.dumps({"step": i})) for i in range(40)]
    turn: list[ChatMessage] = [user("Please fix the failing test in parser.py?")]
    for c in calls:
        turn += [assistant(None, c), tool(c, "ok " + "y" * 50)]
    turn.append(assistant("Fixed."))
    result = await ExtractiveSummarizer(max_chars=400)(history(turn, text_turn("B")), 1)
    text = body(result[0])
    assert len(text) <= 400
    assert "- user: Please fix the failing test in parser.py?" in text.splitlines()
    assert OMITTED in text.splitlines()
    assert "- tool: run(step=39)" in text  # the newest tool outcomes are the ones kept
    assert "- tool: run(step=0)" not in text

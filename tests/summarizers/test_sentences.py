"""Which sentences a summary keeps (summarizers/sentences.py), alone and through a summary."""

from __future__ import annotations

import json

import pytest

from storage.message import ChatMessage
from summarizers import ExtractiveSummarizer
from summarizers.render import parse_summary
from summarizers.sentences import assistant_lines, identifies_only, is_reply_only, user_line
from tests.summarizers.test_extractive import call
from tests.summarizers.test_render import assistant, history, text_turn, tool, user


@pytest.mark.parametrize(
    "text",
    [
        "Yes, please proceed with that booking.",
        "Yes, I'd like to proceed with the upgrade.",
        "Please go ahead with the cancellation.",
        "Sounds good. Thanks!",
        "Can you help with that?",
        "Does that work?",
        "In the meantime, is there anything we can do to move forward?",
    ],
)
def test_a_reply_that_only_allows_or_points_back_keeps_nothing(text: str) -> None:
    assert is_reply_only(text)


@pytest.mark.parametrize(
    "text",
    [
        "Yes, but only the return flight.",  # a condition
        "Yes, use gift card 6276644.",  # a fact
        "Could you please proceed with the cancellation first?",  # a request with an order
        "Can you check options for EWR as well?",  # it names something
        "Change of plan.",  # an answer (the reason asked for)
        "",  # no content: noted as such
    ],
)
def test_a_reply_with_content_is_kept(text: str) -> None:
    assert not is_reply_only(text)


def test_identification_lines() -> None:
    assert identifies_only('"Sure, my user ID is mia_li_3668."')
    assert identifies_only('"My user ID is mia_kim_4397, and the reservation ID is H9ZU1C."')
    assert not identifies_only('"I\'m mia_kim_4397. Please cancel reservation H9ZU1C."')
    assert not identifies_only("\"I don't remember the reservation ID, but I'm omar_rossi_1241.\"")
    assert not identifies_only('"Hello!"')


def test_user_line_leaves_out_vague_sentences_not_requests() -> None:
    line = user_line("I need to change my flight to May 27. Can you help with that?", 160)
    assert line == '"I need to change my flight to May 27."'


def test_assistant_lines_keep_decisions_and_new_facts_not_questions() -> None:
    known = "reservation H9ZU1C: DTW→JFK"
    assert assistant_lines("Would you like to proceed? Let me know.", 160, known) == []
    assert assistant_lines("Hello! I can help with that.", 160, known) == []
    assert assistant_lines("I'll need your user ID. Could you provide it?", 160, known) == []
    assert assistant_lines("I'll be happy to assist you.", 160, known) == []
    assert assistant_lines("Basic economy cannot be modified. Shall I cancel?", 160, known) == [
        '"Basic economy cannot be modified."'
    ]
    # A question that states a fact the summary does not hold yet keeps it.
    assert assistant_lines("The total is $239; shall I charge your card?", 160, known) == [
        '"The total is $239; shall I charge your card?"'
    ]
    assert assistant_lines("H9ZU1C goes DTW→JFK. Anything else?", 160, known) == []


@pytest.mark.anyio
async def test_through_a_summary_identification_goes_once_the_ledger_holds_it() -> None:
    read = call("get_user_details", 1, user_id="mia_li_3668")
    profile = {"user_id": "mia_li_3668", "name": "Mia Li", "email": "mia.li@example.com"}
    turn: list[ChatMessage] = [
        user("I'd like to book a flight to Seattle on May 20."),
        assistant("Could you give me your user ID?"),
        user("Sure, my user ID is mia_li_3668."),
        assistant(None, read),
        tool(read, json.dumps(profile)),
        assistant("Thanks, Mia. Which day should you return?"),
        user("Yes, that works. Can you help with that?"),
        assistant("I have noted it."),
    ]
    result = await ExtractiveSummarizer()(history(turn, text_turn("B")), 1)
    body = parse_summary(result[0])[1]
    assert '"I\'d like to book a flight to Seattle on May 20."' in body  # the goal
    assert "Sure, my user ID" not in body  # the ledger says who the user is ...
    assert "- user mia_li_3668: name=Mia Li" in body  # ... here
    assert "Can you help with that" not in body
    assert "Could you give me your user ID" not in body  # answered
    assert '"I have noted it."' in body  # a commitment
    # The fact keeps its source: the user said it first.
    sources = result[0].metadata["chatlayers"]["sources"]["facts"]
    assert sources["mia_li_3668"] == turn[2].id


@pytest.mark.anyio
async def test_an_identification_the_ledger_does_not_hold_stays() -> None:
    turn: list[ChatMessage] = [
        user("My user ID is mia_li_3668."),
        assistant("I could not find that user."),
    ]
    result = await ExtractiveSummarizer()(history(turn, text_turn("B")), 1)
    assert '"My user ID is mia_li_3668."' in parse_summary(result[0])[1]


@pytest.mark.anyio
async def test_a_checkpoint_of_the_previous_release_merges_section_by_section() -> None:
    # Stored before the heading left the body: after an upgrade its sections are read as
    # sections (not kept aside as "Earlier notes"), and the heading is not written again.
    prior = ChatMessage(
        "system",
        'Summary of the earlier conversation:\nUser requests:\n- "Cancel reservation H9ZU1C."',
        metadata={"chatlayers": {"summary": True, "summarized": 2}},
    )
    result = await ExtractiveSummarizer()([prior, *text_turn("A"), *text_turn("B")], 1)
    body = parse_summary(result[0])[1]
    assert body.startswith('User requests:\n- "Cancel reservation H9ZU1C."\n- "Question A?"')
    assert "Summary of the earlier conversation" not in body
    assert "Earlier notes:" not in body

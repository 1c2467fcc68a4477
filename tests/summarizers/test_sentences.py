"""Which sentences a summary keeps (summarizers/sentences.py), alone and through a summary."""

from __future__ import annotations

import json

import pytest

from storage.message import ChatMessage
from summarizers import ExtractiveSummarizer
from summarizers.render import parse_summary
from summarizers.sentences import (
    asks_only,
    assistant_lines,
    identifies_only,
    is_reply_only,
    restates,
    user_line,
    without_identifications,
)
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
        # asking to look again or to wait: what is looked at is in the lines around it
        "Can you check again?",
        "Can you hold on for a moment?",
        "Could you double-check that for me?",
        "Please wait a second.",
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
        "Can you check the flights to JFK again?",
        "Can you try a different card?",
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
    # Lacking an identifier is about identification too: moot once the ledger holds the user.
    assert identifies_only("\"I don't remember the reservation ID, but I'm omar_rossi_1241.\"")
    assert identifies_only("\"I'm really sorry, but I don't have my reservation ID with me.\"")
    assert identifies_only('"I\u2019ll provide the reservation ID shortly."')
    assert not identifies_only('"I don\'t have the reservation ID. Please cancel my flight."')
    assert not identifies_only('"Hello!"')
    assert identifies_only('"I can provide my user ID, it\'s daiki_lee_6144."')
    assert not identifies_only('"Can you cancel reservation H9ZU1C?"')


def test_identifying_sentences_the_ledger_holds_leave_a_request_line() -> None:
    known = {"daiki_muller_1116"}
    line = '"My user ID is daiki_muller_1116. I won\'t make the flights, so please cancel them."'
    assert without_identifications(line, known) == (
        '"I won\'t make the flights, so please cancel them."'
    )
    assert without_identifications(line, set()) == line  # the ledger does not hold it
    only = '"My user ID is daiki_muller_1116."'
    assert without_identifications(only, known) == only  # nothing else: the line decides
    assert without_identifications("(no content)", known) == "(no content)"


def test_user_line_leaves_out_vague_sentences_not_requests() -> None:
    line = user_line("I need to change my flight to May 27. Can you help with that?", 160)
    assert line == '"I need to change my flight to May 27."'


@pytest.mark.parametrize(
    ("text", "line"),
    [
        # The request is the sentence a pointing-back question refers to (tau-bench airline).
        (
            "Hey there. I'm having some issues with money and need to downgrade all my recent "
            "business class flights to economy. Can you help with that?",
            "I'm having some issues with money and need to downgrade all my recent business "
            "class flights to economy.",
        ),
        (
            "Thank you for helping with that cancellation. I also want to upgrade one of my "
            "reservations to business class. Could you assist me with that?",
            "I also want to upgrade one of my reservations to business class.",
        ),
        # A typographic apostrophe reads like an ASCII one.
        (
            "I\u2019d like to cancel the reservation and get the refund processed to the "
            "original payment method. How do we proceed with that?",
            "I\u2019d like to cancel the reservation and get the refund processed to the "
            "original payment method.",
        ),
        (
            "I don't remember the reservation ID, but I can tell you that I'm feeling sick and "
            "have travel insurance. Is there any way to proceed with that information?",
            "I don't remember the reservation ID, but I can tell you that I'm feeling sick and "
            "have travel insurance.",
        ),
        # "I'm" followed by a name introduces; the request after it is the line.
        ("Hi, I'm Omar Rossi. I want to add a checked bag.", "I want to add a checked bag."),
    ],
)
def test_a_request_is_what_a_pointing_back_question_refers_to(text: str, line: str) -> None:
    assert user_line(text, 160) == f'"{line}"'


def test_assistant_lines_keep_decisions_and_new_facts_not_questions() -> None:
    known = "reservation H9ZU1C: DTW→JFK"
    assert assistant_lines("Would you like to proceed? Let me know.", 160, known) == []
    assert assistant_lines("Hello! I can help with that.", 160, known) == []
    assert assistant_lines("I'll need your user ID. Could you provide it?", 160, known) == []
    assert assistant_lines("I'll be happy to assist you.", 160, known) == []
    # The items of a list offered are what it offers, not decisions (trial: "Airline
    # cancelled flight" read as if the airline had cancelled).
    offered = "The options are:\n\n1. Change of plan\n2. Airline cancelled flight\n3. Other"
    assert assistant_lines(offered, 160, known) == []
    assert assistant_lines("Your reservation has been cancelled", 160, known) == [
        '"Your reservation has been cancelled"'
    ]
    # A refusal is under Declined (summarizers.refusals), not said twice.
    assert assistant_lines("Basic economy cannot be modified. Shall I cancel?", 160, known) == []
    assert assistant_lines(
        "It has been cancelled. Basic economy cannot be modified.", 160, known
    ) == ['"It has been cancelled."']
    # A question that states a fact the summary does not hold yet keeps it.
    assert assistant_lines("The total is $239; shall I charge your card?", 160, known) == [
        '"The total is $239; shall I charge your card?"'
    ]
    assert assistant_lines("H9ZU1C goes DTW→JFK. Anything else?", 160, known) == []
    # Announcing a lookup is not a decision: what it found is in the ledger.
    assert assistant_lines("I have found your user profile.", 160, known) == []
    assert assistant_lines("I'll check the details of your reservation now.", 160, known) == []
    assert assistant_lines("Once I have this information, I'll proceed.", 160, known) == []
    assert assistant_lines("I have cancelled reservation H9ZU1C.", 160, known) == [
        '"I have cancelled reservation H9ZU1C."'
    ]


@pytest.mark.parametrize(
    ("line", "only"),
    [
        ('"How much was ORD-40613 in total?"', True),
        ('"Sorry, what was the tracking number for ORD-99069 again?"', True),
        ('"Which card did I pay my oldest order with?"', True),
        ('"I also need a new tent. What do you have?"', False),  # a goal first
        ('"Can you find me a flight to Seattle?"', False),  # a request
        ('"Is there a way to switch to a nonstop flight on May 17?"', False),
        ('"Cancel H9ZU1C."', False),
        ('"What about reservation XEWRD9?"', False),  # turns to something new
    ],
)
def test_asks_only_is_a_question_for_information(line: str, only: bool) -> None:
    assert asks_only(line) is only


@pytest.mark.anyio
async def test_through_a_summary_an_answered_question_for_information_goes() -> None:
    turns: list[list[ChatMessage]] = [
        [user("How much was ORD-40613 in total?"), assistant("ORD-40613 came to $329.49.")],
        [user("When did ORD-52669 ship?"), assistant("Which order do you mean, ORD-52669?")],
        [user("I also need a new tent. What do you have?"), assistant("I found SKU-2051.")],
    ]
    result = await ExtractiveSummarizer()(history(*turns, text_turn("B")), 1)
    body = parse_summary(result[0])[1]
    assert "How much was ORD-40613" not in body  # answered: neither a goal nor open
    assert '"ORD-40613 came to $329.49."' in body  # the answer says it
    assert '"When did ORD-52669 ship?"' in body  # asked back: still open
    assert '"I also need a new tent. What do you have?"' in body  # a goal


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
async def test_through_a_summary_a_request_keeps_its_goal_without_the_identification() -> None:
    read = call("get_user_details", 1, user_id="mia_li_3668")
    profile = {"user_id": "mia_li_3668", "name": "Mia Li"}
    turn: list[ChatMessage] = [
        user("My user ID is mia_li_3668. I'd like to cancel reservation H9ZU1C."),
        assistant(None, read),
        tool(read, json.dumps(profile)),
        assistant("Done."),
    ]
    result = await ExtractiveSummarizer()(history(turn, text_turn("B")), 1)
    body = parse_summary(result[0])[1]
    assert '- "I\'d like to cancel reservation H9ZU1C."' in body.splitlines()
    assert "- user mia_li_3668: name=Mia Li" in body


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


@pytest.mark.anyio
async def test_through_a_summary_lacking_an_identifier_goes_once_something_was_looked_up() -> None:
    read = call("get_user_details", 1, user_id="mia_li_3668")
    profile = {"user_id": "mia_li_3668", "reservations": ["H9ZU1C"]}
    lacking = "I don't have my reservation ID with me right now."
    found: list[ChatMessage] = [
        user(lacking),
        assistant(None, read),
        tool(read, json.dumps(profile)),
        assistant("You have reservation H9ZU1C."),
    ]
    body = parse_summary((await ExtractiveSummarizer()(history(found, text_turn("B")), 1))[0])[1]
    assert lacking not in body
    assert "reservations=[H9ZU1C]" in body
    # Nothing looked up yet: the assistant should not ask again, so it stays.
    asked: list[ChatMessage] = [user(lacking), assistant("I can look you up by user ID.")]
    body = parse_summary((await ExtractiveSummarizer()(history(asked, text_turn("B")), 1))[0])[1]
    assert f'"{lacking}"' in body


def test_a_later_request_with_facts_restates_an_opener() -> None:
    opener = '"I\'d like to change my flight reservation."'
    assert restates('"I want to change the flight for reservation M05KNL."', opener)
    assert not restates('"I want to cancel reservation M05KNL."', opener)  # not a change
    assert not restates('"I want to change the flight for my reservation."', opener)  # no fact
    assert not restates('"Change flight HAT001 of M05KNL."', '"Change flight HAT002."')


@pytest.mark.anyio
async def test_through_a_summary_an_opener_restated_with_facts_goes() -> None:
    turns: list[list[ChatMessage]] = [
        [user("Hi! I'd like to change my flight reservation."), assistant("Which one?")],
        [user("I want to change the flight for reservation M05KNL."), assistant("Sure.")],
    ]
    body = parse_summary((await ExtractiveSummarizer()(history(*turns, text_turn("B")), 1))[0])[1]
    assert "change my flight reservation" not in body
    assert '"I want to change the flight for reservation M05KNL."' in body


@pytest.mark.anyio
@pytest.mark.parametrize(
    "said",
    [
        "I have the reservation ID: [provide reservation ID]. Please go ahead with the cancel.",
        "My user ID is mia_li_3668. Yes, please go ahead.",
    ],
)
async def test_a_consent_left_once_the_identification_goes_keeps_no_line(said: str) -> None:
    """tau-bench task 9 (trial finding): what is left of the message allows what was
    proposed; the Done line says what it allowed."""
    read = call("get_user_details", 1, user_id="mia_li_3668")
    cancel = call("cancel_reservation", 2, reservation_id="H9ZU1C")
    turns = [
        [
            user("I'd like to cancel reservation H9ZU1C."),
            assistant(None, read),
            tool(read, json.dumps({"user_id": "mia_li_3668", "name": "Mia Li"})),
            assistant("Shall I cancel H9ZU1C?"),
        ],
        [user(said), assistant(None, cancel), tool(cancel, '{"status": "cancelled"}')],
    ]
    result = await ExtractiveSummarizer()(history(*turns, text_turn("B")), 1)
    body = parse_summary(result[0])[1]
    assert "go ahead" not in body
    assert '- "I\'d like to cancel reservation H9ZU1C."' in body.splitlines()
    assert "cancel_reservation(reservation_id=H9ZU1C) -> ok" in body

"""The assistant's refusals: the Declined section (summarizers/refusals.py)."""

from __future__ import annotations

import json

import pytest

from benchmarks.data import DATA
from storage.cli.conversation_file import read_conversations
from summarizers import ExtractiveSummarizer
from summarizers.refusals import is_refusal, refusal_lines, same_refusal
from summarizers.sentences import plain_sentences
from tests.summarizers.test_budget import reservation_reads
from tests.summarizers.test_extractive import body, call, section
from tests.summarizers.test_render import assistant, history, text_turn, tool, user


@pytest.mark.parametrize(
    "sentence",
    [
        "Unfortunately, it cannot be canceled for a refund due to the airline's policy.",
        "I'm unable to remove a passenger from an existing reservation.",
        "I\u2019m unable to remove a passenger from an existing reservation.",
        "Basic economy flights cannot be modified.",
        "Changing the passenger's identity is not allowed.",
        "I'm sorry, but the travel insurance is non-refundable.",
        "Therefore, I cannot upgrade this reservation to business class.",
    ],
)
def test_refusals_are_recognized(sentence: str) -> None:
    assert is_refusal(sentence)


@pytest.mark.parametrize(
    "sentence",
    [
        "If you're unable to locate it, I recommend contacting a human agent.",
        "Unfortunately, I need the reservation ID to proceed with the cancellation.",
        "Is it not possible to change the date?",
        "Your reservation has been cancelled.",
        "I can help you with that.",
    ],
)
def test_conditions_needs_questions_and_actions_are_not_refusals(sentence: str) -> None:
    assert not is_refusal(sentence)


def test_a_refusal_pointing_back_is_put_after_the_record_it_is_about() -> None:
    """tau-bench task 26: the refusal says "it"; the sentence before names the reservation
    (after a list number, which is skipped)."""
    text = (
        "Here's the situation with your reservations:\n\n1. **Reservation IFOYYZ**: This is a "
        "basic economy ticket. Unfortunately, it cannot be canceled for a refund.\n\n"
        "2. **Reservation NQNU5R**: This can be canceled."
    )
    lines = refusal_lines(plain_sentences(text), 160, {"IFOYYZ", "NQNU5R"})
    assert lines == ['IFOYYZ: "Unfortunately, it cannot be canceled for a refund."']
    # Not a record of the ledger, or a refusal that points nowhere: quoted as it is.
    assert refusal_lines(plain_sentences(text), 160, set()) == [
        '"Unfortunately, it cannot be canceled for a refund."'
    ]
    plain = "Basic economy flights cannot be modified."
    assert refusal_lines(["Reservation IFOYYZ is basic.", plain], 160, {"IFOYYZ"}) == [f'"{plain}"']


@pytest.mark.anyio
async def test_a_refusal_outlasts_the_assistants_later_lines() -> None:
    """Only the newest three of the assistant's lines stay; a refusal is a decision the
    agent must keep to when asked again, so it stays however many lines follow."""
    read = call("get_reservation_details", 1, reservation_id="IFOYYZ")
    turns = [
        [
            user("Please cancel IFOYYZ."),
            assistant(None, read),
            tool(read, json.dumps({"reservation_id": "IFOYYZ", "cabin": "basic_economy"})),
            assistant("Reservation IFOYYZ is basic economy. Unfortunately, it cannot be canceled."),
        ],
        *(
            [
                user(f"Question {n}?"),
                assistant(f"Reservation IFOYYZ was booked on 2024-05-{n:02d}."),
            ]
            for n in range(1, 6)
        ),
    ]
    result = await ExtractiveSummarizer()(history(*turns, text_turn("B")), 1)
    assert section(result[0], "Declined:") == ['- IFOYYZ: "Unfortunately, it cannot be canceled."']
    assert "cannot be canceled" not in "\n".join(section(result[0], "Assistant said:"))
    assert len(body(result[0])) <= 2000


@pytest.mark.anyio
async def test_tau_bench_task_26_the_refusal_is_in_the_final_summary() -> None:
    """The trial's finding: the summary of task 26 (token budget) kept the cancellation of
    NQNU5R but not that IFOYYZ could not be cancelled; the agent asked again would offer it."""
    conversation = read_conversations([DATA / "tau_bench_airline_gpt4o_trial0.openai.jsonl"])[26]
    messages = list(conversation.messages)
    result = await ExtractiveSummarizer()(messages[:-2], 1)
    declined = "\n".join(section(result[0], "Declined:"))
    assert 'IFOYYZ: "Unfortunately, it cannot be canceled for a refund' in declined


def test_not_yet_is_not_a_refusal() -> None:
    """The assistant saying what it lacks is not a refusal to keep (trial finding)."""
    for sentence in (
        "Unfortunately, I cannot start the cancellation process without the reservation IDs.",
        "I cannot proceed with modifying your reservation without the reservation ID.",
    ):
        assert not is_refusal(sentence), sentence
    assert is_refusal("I cannot cancel it without insurance.")  # a reason, not a missing id


def test_a_refusal_said_again_replaces_the_older_line() -> None:
    old = '"Unfortunately, I cannot add travel insurance to an existing reservation."'
    again = '"I cannot add travel insurance after the initial booking, per the policy."'
    other = '"I am unable to escalate or flag the reservation for additional review."'
    assert same_refusal(again, old)
    assert not same_refusal(other, old)
    assert not same_refusal(f"IFOYYZ: {again}", old)  # about another record
    assert not same_refusal('"I cannot cancel XEHM4B."', '"I cannot cancel 59XX6W."')


@pytest.mark.anyio
async def test_four_ways_of_refusing_the_same_are_one_line_the_newest() -> None:
    """tau-bench task 36 said four times that insurance cannot be added after booking."""
    said = [
        "Unfortunately, travel insurance cannot be added after the initial booking.",
        "I understand, but travel insurance cannot be added after the initial booking.",
        "Per the policy, travel insurance cannot be added after the initial booking.",
        "I'm sorry: travel insurance cannot be added after the initial booking, sadly.",
    ]
    turns = [
        [
            user(
                f"Add insurance, please ({n}).",
            ),
            assistant(text),
        ]
        for n, text in enumerate(said)
    ]
    result = await ExtractiveSummarizer()(history(*turns, text_turn("B")), 1)
    assert section(result[0], "Declined:") == [f'- "{said[-1]}"']


@pytest.mark.anyio
async def test_over_budget_a_refusal_about_the_record_asked_for_outlasts_the_records_read() -> None:
    """tau-bench task 34 (trial finding): the refusal to cancel XEHM4B for a refund left the
    summary for the user's other reservations, read on the way, just before the agent acted
    on XEHM4B. A refusal about a record the requests name goes only when nothing else is."""
    read = call("get_reservation_details", 0, reservation_id="XEHM4B")
    turns = [
        [
            user("Please cancel XEHM4B."),
            assistant(None, read),
            tool(read, json.dumps({"reservation_id": "XEHM4B", "cabin": "basic_economy"})),
            assistant(
                "XEHM4B is basic economy. Unfortunately, it cannot be canceled for a refund."
            ),
        ],
        [user("Then first upgrade XEHM4B to economy, then cancel it."), *reservation_reads(10)],
    ]
    result = await ExtractiveSummarizer(max_chars=900)(history(*turns, text_turn("B")), 1)
    assert len(body(result[0])) <= 900
    assert section(result[0], "Declined:") == [
        '- XEHM4B: "Unfortunately, it cannot be canceled for a refund."'
    ]
    assert 0 < "\n".join(section(result[0], "Ledger:")).count("- reservation RES") < 10

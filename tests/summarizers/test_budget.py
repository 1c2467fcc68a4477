"""The summary body over its budget (``max_chars``): what is shortened, what goes first, and
what stays to the last (the user's opening and newest requests, the records they name)."""

from __future__ import annotations

import json

import pytest

from storage.message import ChatMessage
from summarizers import ExtractiveSummarizer
from summarizers.extractive import OMITTED
from tests.summarizers.test_extractive import body, call, section
from tests.summarizers.test_render import assistant, history, text_turn, tool, user


@pytest.mark.anyio
async def test_body_is_bounded_and_the_newest_requests_stay() -> None:
    summarize = ExtractiveSummarizer(max_chars=300)
    buffer = history(*(text_turn(f"{i:02d} " + "x" * 40) for i in range(20)))
    result = await summarize(buffer, 2)
    text = body(result[0])
    assert len(text) <= 300
    lines = text.splitlines()
    assert lines[0] == OMITTED
    assert section(result[0], "User requests:")[-1] == '- "Question 17 ' + "x" * 40 + '?"'
    again = await summarize([*result, *text_turn("new")], 2)
    assert body(again[0]).count(OMITTED) == 1
    assert len(body(again[0])) <= 300


def reservation_reads(count: int) -> list[ChatMessage]:
    """``count`` reads of reservations RES000, RES001, ..., each with four flights."""
    out: list[ChatMessage] = []
    for n in range(count):
        read = call("get_reservation_details", n, reservation_id=f"RES{n:03d}")
        flights = [
            {"flight_number": f"HAT{n}{k:02d}", "date": f"2024-05-{10 + k}", "price": 100 + k}
            for k in range(4)
        ]
        record = {"reservation_id": f"RES{n:03d}", "origin": "IAH", "flights": flights}
        out += [assistant(None, read), tool(read, json.dumps(record))]
    return out


@pytest.mark.anyio
async def test_over_budget_the_users_opening_request_outlasts_the_records_read_for_it() -> None:
    """The user states the goal once, then the agent reads record after record looking for
    it (tau-bench task 3): the goal is what the reads are for, so it is the line that stays."""
    goal = "I need to change my flight back from Denver to Houston to be the quickest one."
    turn = [user(goal)]
    turn += reservation_reads(8)
    turn.append(assistant("I found it."))
    result = await ExtractiveSummarizer(max_chars=700)(history(turn, text_turn("B")), 1)
    assert len(body(result[0])) <= 700
    assert section(result[0], "User requests:") == [f'- "{goal}"']
    ledger = section(result[0], "Ledger:")
    assert 0 < len(ledger) < 8  # records went to make room, not the request
    assert "reservation RES007" in "\n".join(ledger)  # the newest read stays longest


@pytest.mark.anyio
async def test_over_budget_the_record_a_request_names_outlasts_the_ones_read_on_the_way() -> None:
    """The user names the reservation to change; the agent reads it, then browses the
    user's other reservations (tau-bench: looking for a payment method): the one the
    request names stays, though it was read first."""
    goal = "Please upgrade reservation RES000 to economy."
    turn = [user(goal)]
    turn += reservation_reads(6)
    turn.append(assistant("I have what I need."))
    result = await ExtractiveSummarizer(max_chars=700)(history(turn, text_turn("B")), 1)
    ledger = "\n".join(section(result[0], "Ledger:"))
    assert len(body(result[0])) <= 700
    assert "reservation RES000" in ledger
    assert 0 < ledger.count("- reservation") < 6  # others went to make room


@pytest.mark.anyio
async def test_over_budget_the_newest_request_outlasts_the_records_read_for_it() -> None:
    """tau-bench task 34: after the opening request the user says what to do now ("first
    upgrade it, then cancel it"); the agent's next reads pushed that line out, and the
    view left only "Yes, proceed with those steps." for the model to act on."""
    goal = "I need to cancel my upcoming flights."
    now = "I'd like to first upgrade the first one to economy, then cancel both."
    turn = [user(goal), assistant("Sure."), user(now), *reservation_reads(8)]
    turn.append(assistant("I have what I need."))
    result = await ExtractiveSummarizer(max_chars=700)(history(turn, text_turn("B")), 1)
    assert len(body(result[0])) <= 700
    assert section(result[0], "User requests:") == [f'- "{goal}"', f'- "{now}"']
    assert 0 < len(section(result[0], "Ledger:")) < 8  # records went to make room


@pytest.mark.anyio
async def test_a_single_huge_line_is_cut_to_max_chars() -> None:
    summarize = ExtractiveSummarizer(max_chars=100, sentence_chars=500)
    buffer = history([user("y" * 1000), assistant(None)], text_turn("B"), system=None)
    result = await summarize(buffer, 1)
    assert len(body(result[0])) == 100


@pytest.mark.anyio
async def test_over_budget_options_go_before_the_ledger_and_actions() -> None:
    search = call("search_products", 1, query="tent")
    found = [{"sku": f"SKU-{n:04d}", "price": 100 + n, "stock": n} for n in range(30)]
    read = call("get_order", 2, order_id="ORD-58213")
    refund = call("issue_refund", 3, order_id="ORD-58213", amount=45.5)
    turn = [
        user("Show me tents, then refund $45.50 on ORD-58213."),
        assistant(None, search),
        tool(search, json.dumps({"results": found})),
        assistant(None, read),
        tool(read, json.dumps({"order_id": "ORD-58213", "total": 104.98, "status": "shipped"})),
        assistant(None, refund),
        tool(refund, json.dumps({"refund_id": "re_8P2KQ01", "amount": 45.5})),
        assistant("Refund re_8P2KQ01 of $45.50 is done."),
    ]
    result = await ExtractiveSummarizer(max_chars=600)(history(turn, text_turn("B")), 1)
    text = body(result[0])
    assert len(text) <= 600
    assert "order ORD-58213: total=$104.98, status=shipped" in text
    assert "refund re_8P2KQ01" in text
    assert "issue_refund(order_id=ORD-58213) -> ok: refund re_8P2KQ01" in text
    options = section(result[0], "Options seen:")
    assert len(options) < 30  # cut first...
    assert "SKU-0029" in text  # ...oldest first: the newest option seen stays longest

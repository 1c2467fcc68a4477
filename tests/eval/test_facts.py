"""What the quality measure counts as a fact (storage/eval/facts.py)."""

from __future__ import annotations

import json

import pytest

from storage.eval.facts import extract_facts


def test_text_facts_are_normalized() -> None:
    text = (
        "Reservation H9ZU1C for sofia_kim_7287: HAT097 on May 17th, 2024, $1,255.00 paid with "
        "gift_card_7091239, 3 bags, card ending 9725, mail A.B@Example.com, "
        "<EMAIL_ADDRESS_3f9a2c1d> and AQLBTL, 2FBBAH."
    )
    assert extract_facts(text) == {
        "H9ZU1C",
        "sofia_kim_7287",
        "7287",
        "HAT097",
        "date 05-17",
        "$1255",
        "gift_card_7091239",
        "7091239",
        "3 bag",
        "9725",
        "a.b@example.com",
        "<EMAIL_ADDRESS_3f9a2c1d>",
        "AQLBTL",
        "2FBBAH",
    }


def test_one_fact_written_two_ways_is_one_fact() -> None:
    assert extract_facts("on 2024-05-27") == extract_facts("on May 27") == {"date 05-27"}
    assert extract_facts("$255") == extract_facts("255 USD") == extract_facts("$255.00")
    assert "6276644" in extract_facts("Gift Card 6276644") & extract_facts("gift_card_6276644")


def test_json_is_walked_key_by_key() -> None:
    document = {
        "reservation_id": "AQLBTL",
        "flights": [{"flight_number": "HAT017", "date": "2024-05-25", "price": 523}],
        "prices": {"economy": 112},
        "total_baggages": 1,
        "payment_methods": {"credit_card_9879898": {"last_four": "9725"}},
        "line1": "12 Main St",
    }
    assert extract_facts(json.dumps(document)) == {
        "AQLBTL",
        "HAT017",
        "date 05-25",
        "$523",
        "$112",
        "credit_card_9879898",
        "9879898",
        "9725",
    }  # a count is no amount; "line1" names a field, not a thing


@pytest.mark.parametrize("text", ["a 2-person tent", "at 4pm", "the 27th", "you may 2 go"])
def test_no_false_facts(text: str) -> None:
    assert extract_facts(text) == set()

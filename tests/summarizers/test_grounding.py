"""A summary is checked against what it covers (summarizers/grounding.py)."""

from __future__ import annotations

from summarizers.grounding import UNVERIFIED, ground

SOURCES = [
    ("m1", "My reservation is H9ZU1C, email Ava@Example.com."),
    ("m2", '{"reservation_id": "H9ZU1C", "flights": [{"date": "2024-05-17", "price": 1255}]}'),
    ("m3", "Refund re_8P2KQ01 is done."),
]


def test_facts_found_in_the_source_are_kept_with_the_first_message_holding_them() -> None:
    text = "reservation h9zu1c: May 17, $1,255.00, 2024; ava@example.com; re_8P2KQ01"
    checked = ground(text, SOURCES)
    assert checked.text == text  # ids and emails ignore case; numbers and dates normalize
    assert checked.ungrounded == ()
    assert checked.facts == {
        "h9zu1c": "m1",
        "May 17": "m2",
        "$1,255.00": "m2",
        "2024": "m2",  # a number inside a date counts
        "ava@example.com": "m1",
        "re_8P2KQ01": "m3",
    }


def test_an_invented_fact_is_replaced_and_reported() -> None:
    checked = ground("reservation ZZ9X8Q refunded $400 on May 30; H9ZU1C kept", SOURCES)
    assert checked.text == (
        f"reservation {UNVERIFIED} refunded {UNVERIFIED} on {UNVERIFIED}; H9ZU1C kept"
    )
    assert checked.ungrounded == ("ZZ9X8Q", "$400", "May 30")
    assert checked.facts == {"H9ZU1C": "m1"}


def test_a_word_in_capitals_is_a_code_only_where_a_code_is_named() -> None:
    checked = ground("IMPORTANT: booking QWERTY is new. SUMMARY follows.", SOURCES)
    assert checked.text == f"IMPORTANT: booking {UNVERIFIED} is new. SUMMARY follows."


def test_a_prior_summarys_sources_are_kept() -> None:
    checked = ground("H9ZU1C", [("prior", "H9ZU1C")], {"H9ZU1C": "m1"})
    assert checked.facts == {"H9ZU1C": "m1"}

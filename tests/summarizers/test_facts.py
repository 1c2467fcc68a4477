"""The facts a summarizer keeps and checks (summarizers/facts.py)."""

from __future__ import annotations

import pytest

from summarizers.facts import fact_key, fact_keys, fact_spans, has_fact


def kinds(text: str) -> list[tuple[str, str]]:
    return [(kind, text[start:end]) for kind, start, end in fact_spans(text)]


def test_each_kind_of_fact_is_found_in_order() -> None:
    text = (
        "Reservation H9ZU1C for sofia_kim_7287 <EMAIL_ADDRESS_3f9a2c1d> (ava@example.com): "
        "HAT097 on 2024-05-17 and May 20th, $1,255.00 or 40 USD, code AQLBTL, 2FBBAH, 9725."
    )
    assert kinds(text) == [
        ("id", "H9ZU1C"),
        ("id", "sofia_kim_7287"),
        ("placeholder", "<EMAIL_ADDRESS_3f9a2c1d>"),
        ("email", "ava@example.com"),
        ("id", "HAT097"),
        ("date", "2024-05-17"),
        ("date", "May 20th"),
        ("money", "$1,255.00"),
        ("money", "40 USD"),
        ("id", "AQLBTL"),
        ("id", "2FBBAH"),
        ("number", "9725"),
    ]


@pytest.mark.parametrize(
    "text", ["a 2-person tent", "line1", "at 4pm", "the 27th", "gpt-4o", "5 bags"]
)
def test_words_with_a_digit_are_not_facts(text: str) -> None:
    assert kinds(text) == []
    assert not has_fact(text)


def test_a_word_in_capitals_reads_as_a_code() -> None:
    # AQLBTL is a reservation id; IMPORTANT looks the same (the grounding check tells them
    # apart by the word before it).
    assert kinds("IMPORTANT") == [("id", "IMPORTANT")]
    assert kinds("STOP") == []  # shorter than a code


def test_keys_normalize_what_is_written_two_ways() -> None:
    assert fact_key("money", "$1,255.00") == fact_key("number", "1255") == "1255"
    assert fact_key("money", "$12.50") == "12.5"
    assert fact_key("date", "2024-05-17") == fact_key("date", "May 17, 2024") == "05-17"
    assert fact_key("date", "Sept. 3rd") == "09-03"
    assert fact_key("email", "Ava@Example.com") == "ava@example.com"
    assert fact_keys("$255 paid; 255 left; HAT097") == {"255": "$255", "HAT097": "HAT097"}

"""The shared scan search (``storage.search``): words, BM25 ranking, ties, snippets."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.errors import InvalidArgumentError
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.search import make_snippet, message_search_text, scan_search, tokenize
from storage.stores.postgres.text import search_term

KEY = ChatKey("u", "s", "a")
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def at(text: str, minutes: int, role: str = "user") -> ChatMessage:
    return ChatMessage(role, text, created_at=T0 + timedelta(minutes=minutes))


def test_tokenize_is_case_and_accent_insensitive() -> None:
    assert tokenize("Café CRÈME, naïve!") == ["cafe", "creme", "naive"]
    assert tokenize("cafe\u0301") == ["cafe"]


def test_rarer_and_repeated_terms_rank_higher() -> None:
    items = [
        (KEY, at("the refund for my flight", 0)),
        (KEY, at("the weather is nice", 1)),
        (KEY, at("refund refund refund please", 2)),
        (KEY, at("the the the", 3)),
    ]
    hits = scan_search("refund the", items, limit=10)
    texts = [h.message.text for h in hits]
    assert texts[0] == "refund refund refund please"
    assert set(texts) == {m.text for _, m in items}
    assert hits == sorted(hits, key=lambda h: -h.score)


def test_ties_go_to_the_newer_message() -> None:
    items = [(KEY, at("same words", 0)), (KEY, at("same words", 5)), (KEY, at("same words", 2))]
    hits = scan_search("words", items, limit=2)
    assert [h.message.created_at for h in hits] == [
        T0 + timedelta(minutes=5),
        T0 + timedelta(minutes=2),
    ]


def test_no_match_and_limit() -> None:
    items = [(KEY, at(f"note {i}", i)) for i in range(10)]
    assert scan_search("absent", items, limit=5) == []
    assert len(scan_search("note", items, limit=3)) == 3


@pytest.mark.parametrize(("query", "limit"), [("", 5), ("  !? ", 5), ("x", 0), ("x", -1), (3, 5)])
def test_bad_arguments_refused(query: object, limit: int) -> None:
    with pytest.raises(InvalidArgumentError):
        scan_search(query, [], limit=limit)  # type: ignore[arg-type]


def test_message_search_text_covers_parts_calls_and_results() -> None:
    parts = ChatMessage(
        "user",
        ({"type": "text", "text": "look here"}, {"type": "refusal", "refusal": "nope"}),
    )
    call = ChatMessage("assistant", None, (ToolCall("c1", "lookup_order", '{"order": "A17"}'),))
    result = ChatMessage("tool", "status shipped", tool_call_id="c1")
    assert "look here" in message_search_text(parts)
    assert "nope" in message_search_text(parts)
    assert "lookup_order" in message_search_text(call)
    assert "A17" in message_search_text(call)
    assert message_search_text(result) == "status shipped"
    hits = scan_search("a17", [(KEY, call)], limit=1)
    assert hits
    assert hits[0].message is call


def test_snippet_around_the_first_match() -> None:
    text = "lorem ipsum " * 40 + "the Refund was approved " + "dolor sit " * 40
    snippet = make_snippet(text, {"refund"})
    assert "Refund" in snippet
    assert snippet.startswith("…")
    assert snippet.endswith("…")
    assert len(snippet) <= 162
    assert make_snippet("short text", {"x"}) == "short text"
    assert make_snippet("a " * 200, {"zzz"}).endswith("…")


# --- the same words on every store -------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=30), st.text(max_size=30))
def test_postgres_terms_are_plain_and_injective(a: str, b: str) -> None:
    """PostgreSQL's words (``search_term``) are runs its parser keeps whole, and two words
    get the same term only when they are the same word."""
    for x in tokenize(a) + tokenize(b):
        assert re.fullmatch(r"[a-z0-9]+", search_term(x)), x
        assert len(search_term(x)) < 1000
    for x in tokenize(a):
        for y in tokenize(b):
            assert (search_term(x) == search_term(y)) == (x == y), (x, y)


def test_postgres_terms_keep_plain_words_and_encode_the_rest() -> None:
    assert search_term("refund") == "refund"
    assert search_term("x86") == "x86"
    assert search_term("my_api_key") == "qz" + b"my_api_key".hex()
    assert search_term("qz616263") != "qz616263"  # looks like an encoding: encoded too
    assert search_term("日本語").startswith("qz")
    assert search_term("z" * 1000).startswith("qzh")


def test_underscores_and_unicode_are_part_of_words() -> None:
    # The rule every store follows (docs/stores.md: "matches the same words on every store").
    assert tokenize("my_api_key, x86_64 & 日本語!") == ["my_api_key", "x86_64", "日本語"]
    items = [(KEY, at("rotate my_api_key", 0)), (KEY, at("the api key", 1))]
    assert [h.message.text for h in scan_search("api", items, limit=5)] == ["the api key"]

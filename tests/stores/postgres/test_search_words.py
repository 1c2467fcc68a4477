"""PostgreSQL search matches words exactly as every other store does: each normalized word
reaches the text-search parser as one lexeme it keeps unchanged
(:func:`storage.stores.postgres.text.search_term`), checked against the server's own parser;
a database whose words were made the older way is re-indexed once on open; a huge message's
words stop at their bound instead of all being made first."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import AsyncIterator

import anyio
import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import storage.stores.postgres.text as words_module
from storage.message import ChatKey, ChatMessage
from storage.search import message_search_text, tokenize
from storage.stores.postgres import PostgresChatStorage, writes
from storage.stores.postgres.schema import SEARCH_WORDS
from storage.stores.postgres.text import search_term, search_words

pytest_plugins = ["tests.servers"]
pytestmark = pytest.mark.postgres

KEY = ChatKey("words", "s", "a")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # asyncpg


@pytest.fixture
async def conn(postgres_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(postgres_dsn)
    yield c
    await c.close()


@pytest.mark.anyio
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(text=st.text(min_size=1, max_size=40) | st.from_regex(r"[a-z0-9_]{1,12}", fullmatch=True))
async def test_every_word_reaches_the_parser_whole(conn: asyncpg.Connection, text: str) -> None:
    for word in tokenize(text):
        term = search_term(word)
        lexemes = await conn.fetchval("SELECT tsvector_to_array(to_tsvector('simple', $1))", term)
        assert lexemes == [term], (word, term, lexemes)


@pytest.mark.anyio
async def test_underscored_words_are_not_split(postgres_dsn: str) -> None:
    async with PostgresChatStorage(postgres_dsn, schema=f"w_{uuid.uuid4().hex[:12]}") as store:
        (keyed,) = await store.save(KEY, ChatMessage("user", "rotate my_api_key today"))
        (plain,) = await store.save(KEY, ChatMessage("user", "the api of my key"))
        assert {h.message.id for h in await store.search("words", "api")} == {plain.id}
        assert {h.message.id for h in await store.search("words", "my_api_key")} == {keyed.id}
        assert {h.message.id for h in await store.search("words", "Müller")} == set()


@pytest.mark.anyio
async def test_words_made_the_older_way_are_made_again_on_open(
    postgres_dsn: str, conn: asyncpg.Connection
) -> None:
    schema = f"w_{uuid.uuid4().hex[:12]}"
    async with PostgresChatStorage(postgres_dsn, schema=schema) as store:
        (keyed,) = await store.save(KEY, ChatMessage("user", "rotate my_api_key today"))
        (plain,) = await store.save(KEY, ChatMessage("user", "the api of my key"))
    t = f'"{schema}".chatlayers_messages'
    # What the previous release stored: the parser's own split, no mark on the column.
    await conn.execute(
        f"UPDATE {t} SET search = to_tsvector('simple', 'rotate my_api_key today') "
        "WHERE message_id = $1",
        keyed.id,
    )
    await conn.execute(f"COMMENT ON COLUMN {t}.search IS NULL")
    async with PostgresChatStorage(postgres_dsn, schema=schema) as store:
        assert {h.message.id for h in await store.search("words", "api")} == {plain.id}
        assert {h.message.id for h in await store.search("words", "my_api_key")} == {keyed.id}
    comment = await conn.fetchval(
        "SELECT col_description(to_regclass($1), a.attnum) FROM pg_attribute a "
        "WHERE a.attrelid = to_regclass($1) AND a.attname = 'search'",
        t,
    )
    assert comment == SEARCH_WORDS


def _all_words_cut(message: ChatMessage) -> str:
    """What search_words made before it read in pieces: every word, then cut."""
    bound = words_module.MAX_SEARCH_CHARS
    words = " ".join(search_term(word) for word in tokenize(message_search_text(message)))
    if len(words) > bound:
        words = words[:bound].rpartition(" ")[0]
    return words


@settings(max_examples=100, deadline=None)
@given(
    text=st.text(
        alphabet=st.sampled_from(
            ["a", "Z", "é", "e", "\u0301", "\u0338", "_", "-", "=", "<", "+", "/", " ", "\n", "日"]
        ),
        max_size=80,
    )
)
def test_words_read_in_pieces_are_the_words_of_the_whole_text(text: str) -> None:
    # Pieces of 4 characters here (65,536 in use), so every cut meets combining accents,
    # words and runs of separators on either side.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(words_module, "_PIECE_CHARS", 4)
        patch.setattr(words_module, "MAX_SEARCH_CHARS", 20)
        message = ChatMessage("user", text)
        assert search_words(message) == _all_words_cut(message)
    message = ChatMessage("user", text * 2000)  # past a real piece, and the bound
    assert search_words(message) == _all_words_cut(message)


@pytest.mark.anyio
async def test_a_huge_message_saves_without_making_words_it_cuts_off(postgres_dsn: str) -> None:
    # 24 MB of words: making all of them, to keep the first 200,000 characters, held the
    # event loop for about 13 s (every other task of the worker stalled); the words stop at
    # the bound now.
    text = "early words " + "filler text " * 2_000_000 + "late"
    longest = 0.0

    async def ticker(done: anyio.Event) -> None:
        nonlocal longest
        while not done.is_set():
            before = time.monotonic()
            await anyio.sleep(0.01)
            longest = max(longest, time.monotonic() - before)

    async with PostgresChatStorage(postgres_dsn, schema=f"w_{uuid.uuid4().hex[:12]}") as store:
        await store.open()
        done = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker, done)
            await anyio.sleep(0.05)  # the ticker is sleeping when the save starts
            (saved,) = await store.save(KEY, ChatMessage("user", text))
            done.set()
        assert longest < 3, f"the event loop was held for {longest:.1f} s"
        assert [h.message.id for h in await store.search("words", "early")] == [saved.id]
        assert await store.search("words", "late") == []  # past the bound, as before


@pytest.mark.anyio
async def test_one_long_word_makes_its_words_in_a_worker_thread(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 20 MB word has no place to cut the text at: normalizing it held the event loop for
    # seconds. A batch over THREAD_CHARS now makes its words off the loop's thread.
    threads: list[bool] = []
    real = search_words

    def recorded(message: ChatMessage) -> str:
        threads.append(threading.current_thread() is threading.main_thread())
        return real(message)

    monkeypatch.setattr(writes, "search_words", recorded)
    word = "é" * (writes.THREAD_CHARS + 1)  # not plain ASCII: hashed, like any long word
    async with PostgresChatStorage(postgres_dsn, schema=f"w_{uuid.uuid4().hex[:12]}") as store:
        (small,) = await store.save(KEY, ChatMessage("user", "short text"))
        (big,) = await store.save(KEY, ChatMessage("user", f"{word} tail"))
        assert threads == [True, False]  # the short one on the loop's thread, as before
        assert [h.message.id for h in await store.search("words", "tail")] == [big.id]
        assert [h.message.id for h in await store.search("words", "short")] == [small.id]

"""Fault scenarios of the conformance kit: what operators, crashes and frameworks do to a store.

- a derived record broken behind the store's back (a summary checkpoint, a head or tally, the
  search index; :attr:`StoreHarness.damage`) never hides the raw record, never raises, and is
  ignored or rebuilt, also through ``summarize::`` stacks and a second instance;
- data of a newer format version is refused with ``SchemaVersionError`` and left untouched;
- forged ``list_sessions`` cursors are refused with ``InvalidArgumentError`` (fuzzed with
  hypothesis when it is installed), and a listing paged while sessions lose conversations
  lists each session once;
- ``search`` matches exactly what the reference store matches, over texts with punctuation,
  underscores, unicode and digits.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import anyio.to_thread
import pytest

from storage.abilities import (
    CheckpointStorage,
    SearchableStorage,
    SequencedStorage,
    SessionListing,
    encode_session_cursor,
    find_ability,
)
from storage.errors import InvalidArgumentError, SchemaVersionError
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage
from storage.testing.ability_tests import need
from storage.testing.harness import (
    CHECKPOINT_DAMAGE,
    INDEX_DAMAGE,
    LAYERINGS,
    NEWER_FORMAT,
    TALLY_DAMAGE,
    StoreHarness,
    call_hook,
    open_store,
)
from storage.testing.protocol_tests import KEY, msg
from storage.testing.reliability_tests import one_backend

__all__ = ["FaultTests", "check_tool_groups", "search_corpus"]

OTHER = ChatKey(KEY.user_id, KEY.session_id, "agent-2")
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def _ids(messages: Sequence[ChatMessage]) -> list[str]:
    return [m.id for m in messages]


def _conversation(turns: int, tag: str = "") -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for n in range(turns):
        out.append(msg(f"question {tag}{n} about the order"))
        out.append(msg(f"answer {tag}{n}: it ships on day {n}", "assistant"))
    return out


def check_tool_groups(messages: Sequence[ChatMessage]) -> None:
    """Assert every ``tool`` result follows its call and every call is answered (what every
    chat API requires of a history)."""
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        if message.role == "assistant" and message.tool_calls:
            assert not open_calls, f"calls {sorted(open_calls)} unanswered before {index}"
            open_calls = {call.id for call in message.tool_calls}
        elif message.role == "tool":
            assert message.tool_call_id in open_calls, (
                f"message {index}: tool result {message.tool_call_id!r} without its call"
            )
            open_calls.discard(message.tool_call_id)
        else:
            assert not open_calls, f"calls {sorted(open_calls)} unanswered before {index}"
    assert not open_calls, f"calls {sorted(open_calls)} unanswered at the end"


# Words that tokenizers disagree on: underscores, hyphens, dots, accents, case, ligatures,
# scripts without spaces, digits, a very long word, and one that looks like an encoding.
_WORDS = [
    "my_api_key",
    "api",
    "key",
    "my",
    "Café",
    "cafe",
    "CAFÉ",
    "naïve",
    "naive",
    "x86_64",
    "3.14",
    "3",
    "14",
    "über",
    "Über",
    "uber",
    "日本語",
    "日本",
    "e-mail",
    "email",
    "foo-bar",
    "foo",
    "bar",
    "snake_case_name",
    "__init__",
    "init",
    "1e5",
    "2024-05-01",
    "v1.2.3",
    "qz616263",
    "qz",
    "abc",
    "ǅemo",
    "ß",
    "ss",
    "ﬁne",
    "fine",
    "x²",
    "x2",
    "Ω",
    "ω",
    "test.py",
    "C++",
    "#tag",
    "emoji🙂word",
    "über_cool",
    "naïve_name",
    "ID_42",
    "id",
    "42",
    "_",
    "__",
    "a_b",
    "a",
    "b",
    "ÀÉÎÕÜ",
    "aeiou",
    "İstanbul",
    "istanbul",
]
_LONG = "z" * 230
_JOINERS = (" ", ", ", "! ", "? ", "; ", "... ", " — ", "\n", "\t", "(", ")", "'", '"', "/", ":")


def search_corpus(seed: int, count: int) -> tuple[list[str], list[str]]:
    """``count`` texts of mixed words and punctuation, and the queries to search them with."""
    rng = random.Random(seed)
    vocabulary = [*_WORDS, _LONG, "https://example.com/path?q=1", "user@example.org"]
    texts = []
    for _ in range(count):
        words = rng.sample(vocabulary, rng.randrange(1, 6))
        texts.append("".join(w + rng.choice(_JOINERS) for w in words).strip())
    queries = [*_WORDS, _LONG, "my_api_key api", "foo-bar", "日本語 cafe", "x86_64 init"]
    return texts, queries


async def _damage(harness: StoreHarness, what: str, key: ChatKey) -> None:
    if harness.damage is None:
        pytest.skip("the harness cannot damage the store's derived records")
    if not await call_hook(harness.damage, what, key):
        pytest.skip(f"the store keeps no record that {what!r} damages")


def _counted(store: object) -> int | None:
    value = getattr(store, "corrupt_derived", None)
    return value if isinstance(value, int) else None


class FaultTests:
    """The fault scenarios (see the module docstring)."""

    # --- derived records ------------------------------------------------------------------

    @pytest.mark.parametrize("form", CHECKPOINT_DAMAGE)
    async def test_unreadable_checkpoint_never_hides_the_record(
        self,
        harness: StoreHarness,
        base: ChatStorage,
        opened_stores: list[ChatStorage],
        form: str,
    ) -> None:
        from storage.layers.summarizing import SummarizingChatStorage

        cps = need(base, CheckpointStorage)
        first = SummarizingChatStorage(base, trigger_at=2, keep_last=1)
        history = _conversation(5)
        await first.save_messages(KEY, history)
        assert (await first.fetch(KEY))[0].is_summary
        assert await cps.load_checkpoint(KEY) is not None
        counted = _counted(base)
        await _damage(harness, form, KEY)
        assert await cps.load_checkpoint(KEY) is None  # ignored: never raises
        head = await cps.head(KEY)
        assert head.last_seq == (await cps.fetch_since(KEY, 0)).seqs[-1]
        # The worker that cached the view keeps serving, also after new saves.
        more = [msg("after the damage"), msg("still served", "assistant")]
        await first.save_messages(KEY, more)
        assert _ids((await first.fetch(KEY))[-2:]) == _ids(more)
        # A second worker (or a restart) rebuilds the view from the raw record, and its
        # compaction replaces the unreadable checkpoint.
        other = base
        if harness.persistent:
            other = await open_store(harness.open)
            opened_stores.append(other)
        second = SummarizingChatStorage(other, trigger_at=2, keep_last=1)
        view = await second.fetch(KEY)
        assert view[0].is_summary
        assert _ids(view[-2:]) == _ids(more)
        stored = await cps.load_checkpoint(KEY)
        assert stored is not None, "the next compaction rewrites the checkpoint"
        assert all(m.is_summary for m in stored.messages)
        assert _ids(await base.fetch(KEY)) == _ids(history + more)  # the record is whole
        assert _ids((await first.fetch(KEY))[-2:]) == _ids(more)
        if counted is not None:
            assert (_counted(base) or 0) > counted, "an unusable checkpoint is counted"

    @pytest.mark.parametrize("form", TALLY_DAMAGE)
    async def test_broken_head_or_tally_never_hides_the_record(
        self, harness: StoreHarness, base: ChatStorage, form: str
    ) -> None:
        from storage.layers.summarizing import SummarizingChatStorage

        seq = need(base, SequencedStorage)
        history = _conversation(3)
        await base.save_messages(KEY, history)
        await base.save(OTHER, msg("the other agent", created_at=T0))
        counted = _counted(base)
        await _damage(harness, form, KEY)
        assert _ids(await base.fetch(KEY)) == _ids(history)
        tail = await seq.fetch_since(KEY, 0)
        assert _ids(tail.messages) == _ids(history)
        head = await seq.head(KEY)
        assert head.last_seq == tail.seqs[-1]
        assert head.epoch
        await self._listed(base, len(history) + 1)
        # Writes go on, numbered after every stored message.
        (after,) = await base.save(KEY, msg("after the damage"))
        assert _ids(await base.fetch(KEY)) == [*_ids(history), after.id]
        tail = await seq.fetch_since(KEY, 0)
        assert list(tail.seqs) == sorted(set(tail.seqs))
        assert (await seq.head(KEY)).last_seq == tail.seqs[-1]
        assert _ids(tail.messages)[-1] == after.id
        await self._listed(base, len(history) + 2)
        merged = await base.fetch_all_chats(KEY.user_id, KEY.session_id)
        assert len(merged) == len(history) + 2
        layer = SummarizingChatStorage(base, trigger_at=2, keep_last=1)
        assert (await layer.fetch(KEY))[-1].id == after.id
        if counted is not None and form.startswith("head"):
            assert (_counted(base) or 0) > counted, "a rebuilt head is counted"

    async def _listed(self, store: ChatStorage, count: int) -> None:
        lister = find_ability(store, SessionListing)
        if lister is None:
            return
        page = await lister.list_sessions(KEY.user_id)
        (info,) = [s for s in page.sessions if s.session_id == KEY.session_id]
        assert info.message_count == count
        assert info.agents == tuple(sorted((KEY.agent_id, OTHER.agent_id)))

    @pytest.mark.parametrize("form", INDEX_DAMAGE)
    async def test_damaged_search_index_never_hides_a_message(
        self, harness: StoreHarness, base: ChatStorage, form: str
    ) -> None:
        searcher = need(base, SearchableStorage)
        (old,) = await base.save(KEY, msg("the refund for order one"))
        assert _ids([h.message for h in await searcher.search(KEY.user_id, "refund")]) == [old.id]
        await _damage(harness, form, KEY)
        (new,) = await base.save(OTHER, msg("a refund for order two"))
        third = ChatKey(KEY.user_id, "session-3", "a")
        await base.save(third, msg("refund number three"))
        await base.delete(third)  # deleting through a damaged index works
        found = {h.message.id for h in await searcher.search(KEY.user_id, "refund")}
        assert found == {old.id, new.id}
        await base.delete(OTHER)
        found = {h.message.id for h in await searcher.search(KEY.user_id, "refund")}
        assert found == {old.id}

    @one_backend
    async def test_newer_format_is_refused_and_left_untouched(
        self, harness: StoreHarness, base: ChatStorage, opened_stores: list[ChatStorage]
    ) -> None:
        if not harness.persistent:
            pytest.skip("a store in process memory has no stored format")
        history = _conversation(2)
        await base.save_messages(KEY, history)
        await _damage(harness, NEWER_FORMAT, KEY)
        before = await call_hook(harness.snapshot) if harness.snapshot is not None else None
        fresh = await open_store(harness.open)
        opened_stores.append(fresh)
        with pytest.raises(SchemaVersionError):
            await fresh.fetch(KEY)
        with pytest.raises(SchemaVersionError):
            await fresh.save(KEY, msg("never written into a newer store"))
        if harness.snapshot is not None:
            assert await call_hook(harness.snapshot) == before, "the data was changed"

    # --- session listing ----------------------------------------------------------------

    @one_backend
    async def test_forged_session_cursors_are_refused(self, base: ChatStorage) -> None:
        lister = need(base, SessionListing)
        for n in range(3):
            await base.save(ChatKey("forger", f"s{n}", "a"), msg("x", created_at=T0))
        forged = [
            "!!not a cursor",
            "eyJ4IjoxfQ",
            "",
            "é",
            _encoded([10**30, "s"]),
            _encoded([-(10**30), "s"]),
            _encoded([2**63, "s"]),
            _encoded([1, "s\ud800"]),
            _encoded([1, "s\x00"]),
            _encoded([1, ""]),
            _encoded([True, "s"]),
            _encoded([1.5, "s"]),
            _encoded([1, "s", 3, 4]),
            _encoded([5, "s", 3]),  # a position past the walk's bound
            _encoded([1, "s", 10**30]),
            _encoded([1, "s", 2.5]),
            _encoded({"a": 1, "b": 2}),
            base64.urlsafe_b64encode(b"[" * 100_000).decode("ascii"),
            base64.urlsafe_b64encode(b"\xff\xfe").decode("ascii"),
        ]
        for cursor in forged:
            with pytest.raises(InvalidArgumentError):
                await lister.list_sessions("forger", cursor=cursor)
        page = await lister.list_sessions("forger", limit=1)
        assert page.next_cursor is not None
        assert len((await lister.list_sessions("forger", cursor=page.next_cursor)).sessions) == 2
        try:
            import hypothesis  # noqa: F401  (the fuzzing needs it; the cases above do not)
        except ImportError:
            return
        await anyio.to_thread.run_sync(_fuzz_cursors, lister)

    async def test_listing_is_stable_under_deletes(self, store: ChatStorage) -> None:
        lister = need(store, SessionListing)
        user = "pager-deletes"
        names = [f"s{n}" for n in range(6)]
        for n, name in enumerate(names):
            at = T0 + timedelta(minutes=n)
            await store.save(ChatKey(user, name, "older"), msg(f"older {n}", created_at=at))
            newer = at + timedelta(seconds=30)
            await store.save(ChatKey(user, name, "newer"), msg(f"newer {n}", created_at=newer))
        expected = [s.session_id for s in (await lister.list_sessions(user)).sessions]
        assert expected == names[::-1]
        last_at = {s.session_id: s.last_at for s in (await lister.list_sessions(user)).sessions}
        seen: list[str] = []
        cursor: str | None = None
        deleted_whole: set[str] = set()
        for _ in range(10):
            page = await lister.list_sessions(user, limit=2, cursor=cursor)
            for info in page.sessions:
                seen.append(info.session_id)
                # Removing conversations never moves a session: its last activity stays.
                assert info.last_at == last_at[info.session_id]
            # Delete the newest conversation of every listed session, of the next one not
            # listed yet, and a whole later session.
            for info in page.sessions:
                await store.delete(ChatKey(user, info.session_id, "newer"))
            unlisted = [s for s in expected if s not in seen and s not in deleted_whole]
            if unlisted:
                await store.delete(ChatKey(user, unlisted[0], "newer"))
            if len(unlisted) > 2:
                gone = unlisted[-1]
                deleted_whole.add(gone)
                for agent in ("older", "newer"):
                    await store.delete(ChatKey(user, gone, agent))
            cursor = page.next_cursor
            if cursor is None:
                break
        assert len(seen) == len(set(seen)), f"listed twice: {seen}"
        assert seen == [s for s in expected if s not in deleted_whole]
        final = (await lister.list_sessions(user)).sessions
        assert all(s.agents == ("older",) and s.message_count == 1 for s in final)

    # --- search -------------------------------------------------------------------------

    async def test_search_matches_the_reference_store(
        self, store: ChatStorage, layering: str
    ) -> None:
        from storage.stores.memory import InMemoryChatStorage

        searcher = need(store, SearchableStorage)
        reference = LAYERINGS[layering](InMemoryChatStorage())
        reference_search = find_ability(reference, SearchableStorage)
        assert reference_search is not None
        texts, queries = search_corpus(seed=19, count=60)
        for n, text in enumerate(texts):
            key = ChatKey("searching", f"s{n % 3}", "a")
            message = msg(text, "user" if n % 2 else "assistant", created_at=T0)
            await store.save(key, message)
            await reference.save(key, message)
        for query in queries:
            got = {h.message.id for h in await searcher.search("searching", query, limit=500)}
            want = {
                h.message.id for h in await reference_search.search("searching", query, limit=500)
            }
            assert got == want, f"search {query!r}: {sorted(got ^ want)} differ"


def _encoded(value: Any) -> str:
    raw = json.dumps(value).encode("utf-8", "surrogatepass")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _fuzz_cursors(lister: SessionListing) -> None:
    """Arbitrary cursors (text, base64 of anything, well-formed pairs of any values) against
    the store, from a worker thread: only ``InvalidArgumentError`` or a page may come back."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    def attempt(cursor: str) -> None:
        with contextlib.suppress(InvalidArgumentError):
            anyio.from_thread.run(functools.partial(lister.list_sessions, "forger", cursor=cursor))

    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner),
        max_leaves=5,
    )
    pairs = st.tuples(st.integers(), st.text()).map(list)
    valid = st.tuples(
        st.datetimes(timezones=st.just(UTC)), st.text(min_size=1).filter(lambda s: "\x00" not in s)
    ).map(lambda p: encode_session_cursor(*p))
    cursors = st.one_of(
        st.text(),
        st.binary().map(lambda b: base64.urlsafe_b64encode(b).decode("ascii")),
        json_values.map(_encoded),
        pairs.map(_encoded),
        valid,
    )

    @settings(
        max_examples=150,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(cursors)
    def run(cursor: str) -> None:
        attempt(cursor)

    run()

"""Ability tests of the conformance kit for what orchestrators read besides messages: a user's
sessions (newest activity first, keyset cursors), search (never another user's messages) and
application records (kept beside messages, never in ``fetch``, erased with the conversation).
Each runs where :func:`storage.abilities.find_ability` finds its ability."""

from __future__ import annotations

from datetime import timedelta

import pytest

from storage.abilities import (
    ConversationRecord,
    RecordStorage,
    SearchableStorage,
    SequencedStorage,
    SessionListing,
    find_ability,
)
from storage.errors import InvalidArgumentError
from storage.message import ChatKey
from storage.protocol import ChatStorage
from storage.testing.ability_tests import OTHER, T0, need, texts
from storage.testing.protocol_tests import KEY, msg

__all__ = ["SessionAbilityTests"]


class SessionAbilityTests:
    """Sessions, search and records (:mod:`storage.abilities`)."""

    # --- SessionListing ------------------------------------------------------------------

    async def _sessions(self, store: ChatStorage, user: str) -> None:
        for n in range(5):
            at = T0 + timedelta(minutes=n)
            await store.save(ChatKey(user, f"s{n}", "agent"), msg(f"hello {n}", created_at=at))
        await store.save(ChatKey(user, "s1", "second-agent"), msg("x", created_at=T0))
        tie = T0 + timedelta(minutes=10)
        await store.save(ChatKey(user, "tie-b", "agent"), msg("tie", created_at=tie))
        await store.save(ChatKey(user, "tie-a", "agent"), msg("tie", created_at=tie))
        await store.save(ChatKey(user + "-other", "s9", "agent"), msg("not mine"))

    async def test_list_sessions_newest_first(self, store: ChatStorage) -> None:
        lister = need(store, SessionListing)
        await self._sessions(store, "lister")
        page = await lister.list_sessions("lister")
        ids = [s.session_id for s in page.sessions]
        assert ids == ["tie-a", "tie-b", "s4", "s3", "s2", "s1", "s0"]
        assert page.next_cursor is None
        s1 = next(s for s in page.sessions if s.session_id == "s1")
        assert s1.agents == ("agent", "second-agent")
        assert s1.message_count == 2
        assert s1.first_at == T0
        assert s1.last_at == T0 + timedelta(minutes=1)
        assert (await lister.list_sessions("nobody")).sessions == ()
        for bad in (0, -1, True):
            with pytest.raises(InvalidArgumentError):
                await lister.list_sessions("lister", limit=bad)
        for cursor in ("!!not a cursor", "eyJ4IjoxfQ"):
            with pytest.raises(InvalidArgumentError):
                await lister.list_sessions("lister", cursor=cursor)
        await store.delete(ChatKey("lister", "s4", "agent"))
        ids = [s.session_id for s in (await lister.list_sessions("lister")).sessions]
        assert "s4" not in ids

    async def test_session_cursor_never_repeats_or_skips(self, store: ChatStorage) -> None:
        lister = need(store, SessionListing)
        await self._sessions(store, "pager")
        expected = [s.session_id for s in (await lister.list_sessions("pager")).sessions]
        seen: list[str] = []
        cursor: str | None = None
        pages = 0
        while True:
            page = await lister.list_sessions("pager", limit=2, cursor=cursor)
            assert len(page.sessions) <= 2
            seen += [s.session_id for s in page.sessions]
            pages += 1
            if pages == 1:
                # Activity during paging: the oldest session becomes the newest. Sessions not
                # touched must still come exactly once, none twice.
                await store.save(
                    ChatKey("pager", "s0", "agent"), msg("back", created_at=T0 + timedelta(hours=1))
                )
            cursor = page.next_cursor
            if cursor is None:
                break
            assert pages < 10
        assert len(seen) == len(set(seen)), seen
        untouched = [s for s in expected if s != "s0"]
        assert [s for s in seen if s != "s0"] == untouched

    # --- SearchableStorage ---------------------------------------------------------------

    async def test_search_finds_only_the_users_messages(self, store: ChatStorage) -> None:
        searcher = need(store, SearchableStorage)
        mine = [
            (ChatKey("searcher", "s1", "a"), msg("the refund for my order is late")),
            (ChatKey("searcher", "s2", "b"), msg("Refund policy: refund within thirty days")),
            (ChatKey("searcher", "s1", "a"), msg("nice weather today", "assistant")),
        ]
        for key, m in mine:
            await store.save(key, m)
        await store.save(ChatKey("searcher-2", "s1", "a"), msg("my refund please"))
        await store.save(ChatKey("Searcher", "s1", "a"), msg("refund in another case"))
        hits = await searcher.search("searcher", "REFUND")
        assert {h.key.user_id for h in hits} == {"searcher"}
        assert sorted(h.message.id for h in hits) == sorted(m.id for _, m in mine[:2])
        for hit in hits:
            assert isinstance(hit.score, float)
            assert "refund" in hit.snippet.lower()
            assert len(hit.snippet) <= 200
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert len(await searcher.search("searcher", "refund", limit=1)) == 1
        assert await searcher.search("searcher", "absentword") == []
        assert await searcher.search("nobody", "refund") == []
        for query, limit in (("", 5), ("refund", 0)):
            with pytest.raises(InvalidArgumentError):
                await searcher.search("searcher", query, limit=limit)
        await store.delete(ChatKey("searcher", "s2", "b"))
        assert [h.message.id for h in await searcher.search("searcher", "refund")] == [
            mine[0][1].id
        ]
        await store.delete_user("searcher")
        assert await searcher.search("searcher", "refund") == []
        assert len(await searcher.search("searcher-2", "refund")) == 1

    # --- RecordStorage -------------------------------------------------------------------

    async def test_records_kept_beside_messages(self, store: ChatStorage) -> None:
        recs = need(store, RecordStorage)
        approval = ConversationRecord(
            "tool_approval", {"tool_call_id": "c1", "decision": "approved", "n": [1, 2.5, None]}
        )
        first = await recs.save_record(KEY, approval)
        assert first.seq > 0
        assert first.created_at is not None
        assert first.created_at.tzinfo is not None
        assert (first.id, first.kind) == (approval.id, "tool_approval")
        assert first.data["decision"] == "approved"
        await store.save(KEY, msg("a message between"))
        status = await recs.save_record(KEY, ConversationRecord("status", {"state": "open"}))
        assert status.seq > first.seq
        again = await recs.save_record(KEY, approval)  # idempotent by id
        assert again.seq == first.seq
        all_records = await recs.fetch_records(KEY)
        assert [r.id for r in all_records] == [approval.id, status.id]
        assert [r.seq for r in all_records] == [first.seq, status.seq]
        assert [r.id for r in await recs.fetch_records(KEY, kind="status")] == [status.id]
        assert await recs.fetch_records(KEY, kind="none") == []
        assert await recs.fetch_records(OTHER) == []
        seq = find_ability(store, SequencedStorage)
        if seq is not None:
            (message_seq,) = (await seq.fetch_since(KEY, 0)).seqs
            assert first.seq < message_seq < status.seq
        # Never a message.
        assert texts(await store.fetch(KEY)) == ["a message between"]
        assert len(await store.fetch_all_chats(KEY.user_id, KEY.session_id)) == 1
        for bad in (ConversationRecord(""), ConversationRecord("k", {"x": {1, 2}})):
            with pytest.raises(InvalidArgumentError):
                await recs.save_record(KEY, bad)
        assert len(await recs.fetch_records(KEY)) == 2

    async def test_records_erased_with_the_conversation(self, store: ChatStorage) -> None:
        recs = need(store, RecordStorage)
        keys = [KEY, OTHER, ChatKey("user-2", "session-1", "agent-1")]
        for key in keys:
            await store.save(key, msg("m"))
            await recs.save_record(key, ConversationRecord("status", {"key": str(key)}))
        await store.delete(KEY)
        assert await recs.fetch_records(KEY) == []
        assert len(await recs.fetch_records(OTHER)) == 1
        await store.delete_user("user-1")
        assert await recs.fetch_records(OTHER) == []
        assert len(await recs.fetch_records(keys[2])) == 1

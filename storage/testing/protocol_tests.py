"""The ``ChatStorage`` protocol tests of the conformance kit, for every stack."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import anyio
import anyio.lowlevel
import attrs
import pytest

from storage.errors import InvalidKeyError, InvalidMessageError, StorageUnavailableError
from storage.message import AgentMessage, ChatKey, ChatMessage, ToolCall
from storage.protocol import ChatStorage

__all__ = ["HOSTILE_PARTS", "KEY", "ProtocolTests", "msg", "tool_turn", "transforms_content"]

KEY = ChatKey("user-1", "session-1", "agent-1")


def transforms_content(layering: str) -> bool:
    """Stacks that rewrite content on save (scrubbing) return what they stored, not the input."""
    return "scrub" in layering


def msg(text: str, role: str = "user", **kwargs: Any) -> ChatMessage:
    return ChatMessage(role, text, **kwargs)


def tool_turn(call_id: str, text: str) -> list[ChatMessage]:
    return [
        msg(text),
        ChatMessage("assistant", None, (ToolCall(call_id, "lookup", '{"q": "x"}'),)),
        ChatMessage("tool", "result", tool_call_id=call_id, name="lookup"),
        msg(f"answer to {text}", "assistant"),
    ]


HOSTILE_PARTS = [
    "a",
    "A",
    "a#b",
    "a:b",
    "a/b",
    "a\\b",
    "..",
    ".",
    "../..",
    "*",
    "a*",
    "?",
    "[x]",
    "{tag}",
    "%",
    "%2F",
    "%252F",
    "a%3Ab",
    "CON",
    "nul",
    " ",
    "a b",
    "😀",
    "👩‍👩‍👧",
    "שלום",
    "e\u0301",
    "x" * 300,
    "_",
    "-",
    "a\nb",
    "a\tb",
    "'; DROP TABLE messages; --",
]


class ProtocolTests:
    """Every protocol rule, on the ``store`` fixture (each layering over the base store)."""

    async def test_save_returns_stored_with_timestamps(self, store: ChatStorage) -> None:
        before = datetime.now(UTC)
        stored = await store.save(KEY, msg("hello"))
        after = datetime.now(UTC)
        assert len(stored) == 1
        created = stored[0].created_at
        assert created is not None
        assert created.tzinfo is UTC
        assert before - timedelta(seconds=1) <= created <= after + timedelta(seconds=1)
        assert await store.fetch(KEY) == stored

    async def test_caller_timestamps_kept_and_converted_to_utc(self, store: ChatStorage) -> None:
        paris = timezone(timedelta(hours=1))
        given = datetime(2024, 3, 1, 12, 30, 15, 123456, tzinfo=paris)
        stored = await store.save(KEY, msg("timed", created_at=given))
        (fetched,) = await store.fetch(KEY)
        assert fetched.created_at == given
        assert fetched.created_at is not None
        assert fetched.created_at.tzinfo is UTC
        assert fetched.created_at.hour == 11
        assert stored[0].created_at == given

    async def test_naive_timestamp_refused(self, store: ChatStorage) -> None:
        with pytest.raises(InvalidMessageError, match="timezone-aware"):
            await store.save(KEY, msg("naive", created_at=datetime(2024, 1, 1)))
        assert await store.fetch(KEY) == []

    async def test_order_is_store_sequence_not_timestamp(self, store: ChatStorage) -> None:
        base = datetime(2024, 1, 1, tzinfo=UTC)
        messages = [msg(f"m{i}", created_at=base - timedelta(minutes=i)) for i in range(5)]
        for m in messages:
            await store.save(KEY, m)
        assert [m.text for m in await store.fetch(KEY)] == [f"m{i}" for i in range(5)]

    # --- idempotence and atomicity ------------------------------------------------------------

    async def test_idempotent_save_by_id(self, store: ChatStorage) -> None:
        first = msg("once")
        assert len(await store.save(KEY, first)) == 1
        assert await store.save(KEY, first) == []
        assert await store.save(KEY, attrs.evolve(first, content="changed")) == []
        batch = [first, msg("two"), msg("three")]
        stored = await store.save_messages(KEY, batch)
        assert [m.id for m in stored] == [batch[1].id, batch[2].id]
        assert [m.text for m in await store.fetch(KEY)] == ["once", "two", "three"]

    async def test_duplicate_id_within_batch_stored_once(self, store: ChatStorage) -> None:
        m = msg("dup")
        stored = await store.save_messages(KEY, [m, m])
        assert len(stored) == 1
        assert len(await store.fetch(KEY)) == 1

    async def test_same_id_under_other_keys_is_independent(self, store: ChatStorage) -> None:
        m = msg("shared id")
        other = ChatKey("user-1", "session-1", "agent-2")
        assert len(await store.save(KEY, m)) == 1
        assert len(await store.save(other, m)) == 1
        assert len(await store.fetch(other)) == 1

    @pytest.mark.parametrize(
        "bad",
        [
            ChatMessage("robot", "who am I"),
            ChatMessage("user", 42),  # type: ignore[arg-type]
            ChatMessage("tool", "no call id"),
            ChatMessage("user", "calls", (ToolCall("c1", "f", "{}"),)),
            ChatMessage("user", "surrogate \ud800 inside"),
            "not a message",
        ],
        ids=[
            "unknown-role",
            "int-content",
            "tool-without-id",
            "user-tool-calls",
            "surrogate",
            "str",
        ],
    )
    async def test_bad_message_in_batch_stores_nothing(self, store: ChatStorage, bad: Any) -> None:
        await store.save(KEY, msg("existing"))
        with pytest.raises(InvalidMessageError, match="message 1"):
            await store.save_messages(KEY, [msg("good 1"), bad, msg("good 2")])
        assert [m.text for m in await store.fetch(KEY)] == ["existing"]

    async def test_bad_single_message_names_problem(self, store: ChatStorage) -> None:
        with pytest.raises(InvalidMessageError, match="unknown role 'robot'"):
            await store.save(KEY, ChatMessage("robot", "x"))
        with pytest.raises(InvalidMessageError, match="content must be"):
            await store.save(KEY, ChatMessage("user", 3.5))  # type: ignore[arg-type]
        assert await store.fetch(KEY) == []

    def test_nul_in_key_refused(self) -> None:
        with pytest.raises(InvalidKeyError, match="NUL"):
            ChatKey("u\x00", "s", "a")
        with pytest.raises(InvalidKeyError, match="must not be empty"):
            ChatKey("u", "", "a")
        with pytest.raises(InvalidKeyError, match="must be a str"):
            ChatKey("u", "s", 7)  # type: ignore[arg-type]

    async def test_nul_in_content_is_lossless_or_refused_whole(self, store: ChatStorage) -> None:
        await store.save(KEY, msg("before"))
        m = msg("nul \x00 inside")
        refused: InvalidMessageError | None = None
        try:
            stored = await store.save(KEY, m)
        except InvalidMessageError as exc:  # documented alternative: refused whole
            refused = exc
        if refused is not None:
            assert "NUL" in str(refused)
            assert [x.text for x in await store.fetch(KEY)] == ["before"]
        else:
            assert [x.text for x in await store.fetch(KEY)] == ["before", stored[0].text]
            assert stored[0].text == "nul \x00 inside"

    # --- windows --------------------------------------------------------------------------------

    async def test_limit_returns_newest(self, store: ChatStorage, layering: str) -> None:
        await store.save_messages(
            KEY, [msg(f"m{i}", "user" if i % 2 == 0 else "assistant") for i in range(10)]
        )
        # A summarizing stack's window of its view starts at a turn boundary.
        newest = ["m8", "m9"] if "summarize" in layering else ["m7", "m8", "m9"]
        assert [m.text for m in await store.fetch(KEY, limit=3)] == newest
        assert len(await store.fetch(KEY, limit=100)) == 10
        assert await store.fetch(KEY, limit=0) == []
        with pytest.raises(ValueError, match="limit"):
            await store.fetch(KEY, limit=-1)

    async def test_limit_window_never_starts_with_orphaned_tool_result(
        self, store: ChatStorage, layering: str
    ) -> None:
        messages = [
            msg("book a flight"),
            ChatMessage(
                "assistant",
                None,
                (
                    ToolCall("c1", "search", '{"from": "SFO"}'),
                    ToolCall("c2", "search", '{"to": "JFK"}'),
                ),
            ),
            ChatMessage("tool", "r1", tool_call_id="c1", name="search"),
            ChatMessage("tool", "r2", tool_call_id="c2", name="search"),
            msg("done", "assistant"),
        ]
        await store.save_messages(KEY, messages)
        expected = {
            1: ["done"],
            2: ["done"],  # [r2, done]: r2's call is outside the window
            3: ["done"],
            4: [None, "r1", "r2", "done"],
            5: ["book a flight", None, "r1", "r2", "done"],
        }
        if "summarize" in layering:  # the turn's request, then its newest groups that fit
            # (at least the newest: a window never shows an older state than the record's)
            expected.update({1: ["book a flight", "done"], 2: ["book a flight", "done"]})
            expected.update({3: ["book a flight", "done"], 4: ["book a flight", "done"]})
        for limit, texts in expected.items():
            window = await store.fetch(KEY, limit=limit)
            assert [m.content for m in window] == texts, limit

    async def test_empty_key_fetches_empty(self, store: ChatStorage) -> None:
        assert await store.fetch(ChatKey("nobody", "none", "no-agent")) == []
        assert await store.fetch(ChatKey("nobody", "none", "no-agent"), limit=5) == []
        assert await store.fetch_all_chats("nobody", "none") == []

    # --- copies -----------------------------------------------------------------------------------

    async def test_mutating_results_never_changes_store(self, store: ChatStorage) -> None:
        parts = [{"type": "text", "text": "part"}]
        original = ChatMessage("user", parts, metadata={"tags": ["a"]})
        await store.save(KEY, original)
        parts[0]["text"] = "mutated after save"
        fetched = await store.fetch(KEY)
        fetched.append(msg("extra"))
        fetched.clear()
        (again,) = await store.fetch(KEY)
        content: Any = again.content
        assert content[0]["text"] == "part"
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            again.content = "x"  # type: ignore[misc]
        with pytest.raises(TypeError):
            again.metadata["tags"] = []  # type: ignore[index]
        with pytest.raises(TypeError):
            content[0]["text"] = "x"
        wire = again.to_openai()
        wire["content"][0]["text"] = "changed wire copy"
        (third,) = await store.fetch(KEY)
        third_content: Any = third.content
        assert third_content[0]["text"] == "part"
        assert third.metadata["tags"] == ("a",)

    # --- keys -----------------------------------------------------------------------------------

    async def test_hostile_keys_kept_apart(self, store: ChatStorage) -> None:
        keys = [ChatKey(p, "s", "a") for p in HOSTILE_PARTS]
        keys += [ChatKey("u", p, "a") for p in HOSTILE_PARTS]
        keys += [ChatKey("u", "s", p) for p in HOSTILE_PARTS]
        # joins that a naive separator would confuse
        keys += [ChatKey("a:b", "c", "d"), ChatKey("a", "b:c", "d"), ChatKey("a", "b", "c:d")]
        keys += [ChatKey("a/b", "c", "d"), ChatKey("a", "b/c", "d"), ChatKey("a#b", "c", "d")]
        keys = list(dict.fromkeys(keys))
        for n, key in enumerate(keys):
            await store.save(key, msg(f"message {n}"))
        for n, key in enumerate(keys):
            assert [m.text for m in await store.fetch(key)] == [f"message {n}"], key

    async def test_fetch_all_chats_is_per_session(self, store: ChatStorage) -> None:
        await store.save(ChatKey("u", "s", "a"), msg("mine"))
        await store.save(ChatKey("u", "s2", "a"), msg("other session"))
        await store.save(ChatKey("u2", "s", "a"), msg("other user"))
        await store.save(ChatKey("u*", "s", "a"), msg("glob user"))
        assert [m.message.text for m in await store.fetch_all_chats("u", "s")] == ["mine"]

    # --- merged view ------------------------------------------------------------------------------

    async def test_fetch_all_chats_merged_in_save_order(self, store: ChatStorage) -> None:
        agents = ["billing", "tech", "billing", "router", "tech", "billing"]
        same_time = datetime(2024, 5, 5, 10, 0, tzinfo=UTC)
        for n, agent in enumerate(agents):
            await store.save(ChatKey("u", "s", agent), msg(f"turn {n}", created_at=same_time))
        merged = await store.fetch_all_chats("u", "s")
        assert all(isinstance(m, AgentMessage) for m in merged)
        assert [(m.agent_id, m.message.text) for m in merged] == [
            (agent, f"turn {n}") for n, agent in enumerate(agents)
        ]

    async def test_fetch_all_chats_orders_by_created_at_first(self, store: ChatStorage) -> None:
        t0 = datetime(2024, 5, 5, 10, 0, tzinfo=UTC)
        await store.save(
            ChatKey("u", "s", "late"), msg("second", created_at=t0 + timedelta(seconds=5))
        )
        await store.save(ChatKey("u", "s", "early"), msg("first", created_at=t0))
        merged = await store.fetch_all_chats("u", "s")
        assert [(m.agent_id, m.message.text) for m in merged] == [
            ("early", "first"),
            ("late", "second"),
        ]
        assert not merged[0].message.text.startswith("[")

    # --- deletion -------------------------------------------------------------------------------

    async def test_delete_one_conversation(self, store: ChatStorage) -> None:
        a, b = ChatKey("u", "s", "a"), ChatKey("u", "s", "b")
        await store.save(a, msg("a"))
        await store.save(b, msg("b"))
        await store.delete(a)
        assert await store.fetch(a) == []
        assert [m.text for m in await store.fetch(b)] == ["b"]
        await store.delete(a)  # deleting again is a no-op
        assert len(await store.save(a, msg("again"))) == 1

    async def test_delete_user_erases_only_that_user(self, store: ChatStorage) -> None:
        victims = [ChatKey("u", "s1", "a"), ChatKey("u", "s2", "b")]
        survivors = [
            ChatKey("u1", "s1", "a"),
            ChatKey("U", "s1", "a"),
            ChatKey("u*", "s1", "a"),
            ChatKey("xu", "s1", "a"),
        ]
        for key in victims + survivors:
            await store.save(key, msg(str(key)))
        await store.delete_user("u")
        for key in victims:
            assert await store.fetch(key) == []
        assert await store.fetch_all_chats("u", "s1") == []
        for key in survivors:
            assert [m.text for m in await store.fetch(key)] == [str(key)]

    # --- content shapes ---------------------------------------------------------------------------

    async def test_unicode_and_parts_and_extra_fields_round_trip(
        self, store: ChatStorage, layering: str
    ) -> None:
        wire: list[dict[str, Any]] = [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "emoji 😀 zwj 👩‍👩‍👧 rtl שלום combining e\u0301 cjk 漢字"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://example.org/a.png", "detail": "low"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"a": [1, 2.5, null]}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": '{"ok": true}'},
            {"role": "assistant", "content": "", "name": "bot"},
            {"role": "assistant"},
        ]
        messages = [ChatMessage.from_openai(d) for d in wire]
        stored = await store.save_messages(KEY, messages)
        fetched = await store.fetch(KEY)
        assert fetched == stored
        if not transforms_content(layering):
            assert [m.to_openai() for m in fetched] == wire

    async def test_metadata_round_trips(self, store: ChatStorage) -> None:
        m = msg("with metadata", metadata={"trace": {"id": "t-1", "spans": [1, 2]}, "score": 0.5})
        await store.save(KEY, m)
        (fetched,) = await store.fetch(KEY)
        assert fetched.metadata == m.metadata
        assert fetched.metadata["trace"]["spans"] == (1, 2)

    # --- concurrency ------------------------------------------------------------------------------

    async def test_concurrent_writers_keep_each_order(self, store: ChatStorage) -> None:
        keys = [ChatKey("u", "s", f"agent-{k}") for k in range(3)]

        async def writer(w: int) -> None:
            for i in range(15):
                await store.save(keys[w % 3], msg(f"w{w}-{i}"))
                await anyio.lowlevel.checkpoint()

        async with anyio.create_task_group() as tg:
            for w in range(6):
                tg.start_soon(writer, w)
        total = 0
        for key in keys:
            texts = [m.text for m in await store.fetch(key)]
            total += len(texts)
            for w in range(6):
                mine = [t for t in texts if t.startswith(f"w{w}-")]
                assert mine == (
                    [f"w{w}-{i}" for i in range(15)] if w % 3 == keys.index(key) else []
                )
        assert total == 90
        assert len(await store.fetch_all_chats("u", "s")) == 90

    async def test_async_context_manager_closes(self, store: ChatStorage) -> None:
        async with store as entered:
            assert entered is store
            await entered.save(KEY, msg("inside"))
        # Closed means closed: every later call fails with the library's error, also
        # through the layers (nothing is served from a stale connection or a cache).
        with pytest.raises(StorageUnavailableError):
            await store.fetch(KEY)
        with pytest.raises(StorageUnavailableError):
            await store.save(KEY, msg("after close"))
        await store.aclose()  # closing twice is harmless

    async def test_list_keys_when_listable(self, store: ChatStorage) -> None:
        from storage.abilities import ListableStorage, find_ability

        listable = find_ability(store, ListableStorage)
        if listable is None:
            pytest.skip("this stack cannot list its keys")
        keys = [ChatKey("u2", "s", "a"), ChatKey("u1", "s2", "b"), ChatKey("u1", "s1", "a:b")]
        for key in keys:
            await store.save(key, msg("x"))
        await store.save(ChatKey("u3", "s", "a"), msg("gone"))
        await store.delete(ChatKey("u3", "s", "a"))
        assert await listable.list_keys() == sorted(
            keys, key=lambda k: (k.user_id, k.session_id, k.agent_id)
        )
        assert await listable.list_keys(user_id="u1") == [keys[2], keys[1]]
        assert await listable.list_keys(user_id="u1", session_id="s2") == [keys[1]]
        assert await listable.list_keys(session_id="s") == [keys[0]]

"""Layer paths and hostile inputs in the conformance kit.

- the transforming layer's drop (``None``) and raise paths over the base store;
- the *active* summarizing path (a trigger low enough that views are summarized) over the
  base store, plain and scrubbed, and across two instances over one database;
- lone surrogates anywhere and nesting beyond the documented limit, on every stack; no input
  raises ``RecursionError``, on save or on a later fetch from a deep call stack.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from storage.errors import InvalidKeyError, InvalidMessageError
from storage.message import MAX_DEPTH, ChatKey, ChatMessage, ToolCall
from storage.protocol import ChatStorage
from storage.testing.harness import StoreHarness, open_store, scrubbed
from storage.testing.protocol_tests import KEY, msg
from storage.testing.stack_depth import at_headroom

__all__ = ["LayerPathTests", "nested"]


class TransformFailed(Exception):
    """Raised by the kit's failing transform: must reach the caller unchanged."""


def nested(depth: int, leaf: Any = "leaf") -> Any:
    """``{"n": {"n": ... leaf}}`` ``depth`` mappings deep, built without recursion."""
    value: Any = leaf
    for _ in range(depth):
        value = {"n": value}
    return value


def _conversation(turns: int) -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for n in range(turns):
        out.append(msg(f"question number {n} about the order"))
        out.append(msg(f"answer number {n}: it ships on day {n}", "assistant"))
    return out


class LayerPathTests:
    """Layers over the base store, and inputs every stack must refuse cleanly."""

    # --- transforming layer --------------------------------------------------------------

    @pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
    async def test_transform_drop_path(self, base: ChatStorage, asynchronous: bool) -> None:
        from storage.layers.transforming import TransformingChatStorage

        def drop(message: ChatMessage, key: ChatKey) -> ChatMessage | None:
            return None if message.text.startswith("secret") else message

        async def drop_async(message: ChatMessage, key: ChatKey) -> ChatMessage | None:
            return drop(message, key)

        layer = TransformingChatStorage(base, drop_async if asynchronous else drop)
        stored = await layer.save_messages(KEY, [msg("a"), msg("secret 1"), msg("b")])
        assert [m.text for m in stored] == ["a", "b"]
        assert await layer.save(KEY, msg("secret 2")) == []
        assert await layer.save_messages(KEY, [msg("secret 3")]) == []
        assert [m.text for m in await base.fetch(KEY)] == ["a", "b"]
        assert await layer.fetch(KEY) == await base.fetch(KEY)

    @pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
    async def test_transform_raise_path_stores_nothing(
        self, base: ChatStorage, asynchronous: bool
    ) -> None:
        from storage.layers.transforming import TransformingChatStorage

        def explode(message: ChatMessage, key: ChatKey) -> ChatMessage:
            if message.text == "boom":
                raise TransformFailed("the transform failed")
            return attrs.evolve(message, content=message.text + "!")

        async def explode_async(message: ChatMessage, key: ChatKey) -> ChatMessage:
            return explode(message, key)

        layer = TransformingChatStorage(base, explode_async if asynchronous else explode)
        await layer.save(KEY, msg("before"))
        with pytest.raises(TransformFailed, match="the transform failed"):
            await layer.save_messages(KEY, [msg("one"), msg("boom"), msg("two")])
        with pytest.raises(TransformFailed):
            await layer.save(KEY, msg("boom"))
        assert [m.text for m in await base.fetch(KEY)] == ["before!"]
        with pytest.raises(InvalidMessageError):  # validated before the transform runs
            await layer.save_messages(KEY, [msg("fine"), ChatMessage("robot", "boom")])
        assert [m.text for m in await base.fetch(KEY)] == ["before!"]

    # --- active summarizing ----------------------------------------------------------------

    @pytest.mark.parametrize("scrub", [False, True], ids=["plain", "scrub"])
    async def test_active_summarizing_path(self, base: ChatStorage, scrub: bool) -> None:
        from storage.layers.summarizing import SummarizingChatStorage

        inner = scrubbed(base) if scrub else base
        layer = SummarizingChatStorage(inner, trigger_at=2, keep_last=1)
        history = _conversation(5)
        await layer.save_messages(KEY, history)
        view = await layer.fetch(KEY)
        assert view[0].is_summary, "a history over the trigger is served summarized"
        assert len(view) < len(history)
        assert [m.id for m in view[-2:]] == [m.id for m in history[-2:]]  # last turn verbatim
        raw = await base.fetch(KEY)
        assert [m.id for m in raw] == [m.id for m in history]  # the record is untouched
        assert not any(m.is_summary for m in raw)
        assert len(await layer.fetch_all_chats(KEY.user_id, KEY.session_id)) == len(history)
        # Saves after activation land in the record and at the end of the view.
        more = [msg("one more question"), msg("one more answer", "assistant")]
        stored = await layer.save_messages(KEY, more)
        view = await layer.fetch(KEY)
        assert view[0].is_summary
        assert [m.id for m in view[-2:]] == [m.id for m in stored]
        assert [m.id for m in await base.fetch(KEY)] == [m.id for m in history + more]
        window = await layer.fetch(KEY, limit=2)  # the leading summary, then the newest turn
        assert window[0].is_summary
        assert [m.id for m in window[1:]] == [m.id for m in stored]
        await layer.delete(KEY)
        assert await layer.fetch(KEY) == []
        assert await base.fetch(KEY) == []

    async def test_active_summarizing_across_instances(
        self, base: ChatStorage, harness: StoreHarness, opened_stores: list[ChatStorage]
    ) -> None:
        from storage.layers.summarizing import SummarizingChatStorage

        if not harness.persistent:
            pytest.skip("a second instance of this store does not see the first one's data")
        first = SummarizingChatStorage(base, trigger_at=2, keep_last=1)
        history = _conversation(5)
        await first.save_messages(KEY, history)
        assert (await first.fetch(KEY))[0].is_summary
        other = await open_store(harness.open)
        opened_stores.append(other)
        second = SummarizingChatStorage(other, trigger_at=2, keep_last=1)
        view = await second.fetch(KEY)
        assert view[0].is_summary
        assert [m.id for m in view[-2:]] == [m.id for m in history[-2:]]
        stored = await second.save(KEY, msg("from the second worker"))
        assert (await second.fetch(KEY))[-1].id == stored[0].id
        assert [m.id for m in await base.fetch(KEY)][-1] == stored[0].id

    # --- lone surrogates -----------------------------------------------------------------

    def test_lone_surrogate_in_a_key_refused(self) -> None:
        for parts in (("u\ud800", "s", "a"), ("u", "s\udfff", "a"), ("u", "s", "\ud83d")):
            with pytest.raises(InvalidKeyError):
                ChatKey(*parts)

    @pytest.mark.parametrize(
        ("field", "message"),
        [
            ("content", ChatMessage("user", "text \ud800 here")),
            ("name", ChatMessage("user", "hi", name="bob\udc00")),
            (
                "tool_call_id",
                ChatMessage("tool", "r", tool_call_id="c\ud800"),
            ),
            (
                "tool_calls",
                ChatMessage("assistant", None, (ToolCall("c1", "f", '{"a": "\ud800"}'),)),
            ),
            ("tool_calls", ChatMessage("assistant", None, (ToolCall("c1", "f\ud800", "{}"),))),
            ("content", ChatMessage("user", [{"type": "text", "text": "\udfff"}])),
            ("metadata", ChatMessage("user", "hi", metadata={"note": "x\ud800"})),
            ("metadata", ChatMessage("user", "hi", metadata={"k\ud800": 1})),
        ],
        ids=[
            "content",
            "name",
            "tool_call_id",
            "arguments",
            "function-name",
            "part",
            "metadata-value",
            "metadata-key",
        ],
    )
    async def test_lone_surrogate_in_a_message_refused_naming_the_field(
        self, store: ChatStorage, field: str, message: ChatMessage
    ) -> None:
        await store.save(KEY, msg("before"))
        with pytest.raises(InvalidMessageError) as info:
            await store.save_messages(KEY, [msg("good"), message])
        assert "surrogate" in str(info.value)
        assert field.split("_")[0] in str(info.value) or field in str(info.value)
        assert [m.text for m in await store.fetch(KEY)] == ["before"]

    # --- nesting -----------------------------------------------------------------------------

    # 1500 levels: deeper than the interpreter's recursion limit (1000 by default).
    @pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1_500], ids=["limit+1", "1500"])
    async def test_nesting_beyond_the_limit_refused(self, store: ChatStorage, depth: int) -> None:
        deep_metadata = ChatMessage("user", "hi", metadata=nested(depth))
        deep_part = ChatMessage("user", [{"type": "text", "text": "x", "extra": nested(depth)}])
        for message in (deep_metadata, deep_part):
            with pytest.raises(InvalidMessageError, match="deeper"):
                await store.save(KEY, message)
        assert await store.fetch(KEY) == []

    async def test_nesting_at_the_limit_round_trips_from_a_deep_stack(
        self, store: ChatStorage
    ) -> None:
        depth = MAX_DEPTH - 2  # the message's metadata mapping is one more level
        message = ChatMessage("user", "deep", metadata={"tree": nested(depth)})
        await store.save(KEY, message)

        # Fetch with little stack left: a recursive decoder would raise RecursionError.
        (fetched,) = await at_headroom(100, lambda: store.fetch(KEY))
        tree: Any = fetched.metadata["tree"]
        for _ in range(depth):
            tree = tree["n"]
        assert tree == "leaf"

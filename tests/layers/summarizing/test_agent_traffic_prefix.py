"""A prompt-cache-friendly view: between two compactions every fetch returns the
previous view as an exact prefix plus the new messages; the leading system prompt stays first
and unchanged across compactions; ``view_version`` changes only when a compaction happens."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, event, given, settings, target
from hypothesis import strategies as st

from storage.history import check_tool_pairs
from storage.layers.summarizing import SummarizingChatStorage
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.memory import InMemoryChatStorage

KEY = ChatKey("u", "s", "a")
SYSTEM = ChatMessage("system", "You are a booking agent. Be brief.")

step = st.one_of(
    st.tuples(st.just("user"), st.integers(1, 40)),
    st.tuples(st.just("assistant"), st.integers(1, 40)),
    st.tuples(st.just("tool"), st.integers(1, 400)),  # a call and its result of N words
)

budgets: st.SearchStrategy[dict[str, Any]] = st.sampled_from(
    [
        {"trigger_at": 3, "keep_last": 1},
        {"trigger_at": 5, "keep_last": 2},
        {"trigger_tokens": 600, "keep_tokens": 150},
        {"trigger_tokens": 900, "trim_tool_results": 200, "trim_keep_turns": 1},
        {"trigger_at": 4, "keep_last": 1, "summaries": "memory"},
    ]
)


def messages_for(kind: str, size: int, n: int) -> list[ChatMessage]:
    words = " ".join(f"w{n}_{i}" for i in range(size))
    if kind == "tool":
        call = ToolCall(f"c{n}", "search", '{"q": "x"}')
        return [
            ChatMessage("assistant", None, (call,)),
            ChatMessage("tool", words, tool_call_id=call.id),
        ]
    return [ChatMessage(kind, words)]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(step, min_size=1, max_size=45), options=budgets)
def test_property_views_grow_only_at_their_end_between_compactions(
    steps: list[tuple[str, int]], options: dict[str, Any]
) -> None:
    async def run() -> None:
        layer = SummarizingChatStorage(InMemoryChatStorage(), **options)
        await layer.save(KEY, SYSTEM)
        previous = await layer.fetch(KEY)
        version = layer.view_version(KEY)
        new: list[ChatMessage] = []
        compactions = 0
        for n, (kind, size) in enumerate(steps):
            batch = messages_for(kind, size, n)
            new += await layer.save_messages(KEY, batch)
            view = await layer.fetch(KEY)
            check_tool_pairs(view)
            first = view[0]  # the prompt, alone or with the summary merged in after it
            assert (first.id, first.role) == (SYSTEM.id, "system")
            assert first.content == SYSTEM.content or first.text.startswith(SYSTEM.text + "\n")
            assert not any(m.role == "system" for m in view[1:])
            now = layer.view_version(KEY)
            if now == version or version is None:  # None: not cached yet (store mode)
                assert view[: len(previous)] == previous  # an exact prefix
                assert [m.id for m in view[len(previous) :]] == [m.id for m in new]
            else:
                compactions += 1
            previous, version, new = view, now, []
        assert compactions <= layer.summaries_made + layer.trims_made
        target(float(compactions))  # steer the search toward runs with compactions
        event("compacted" if compactions else "never compacted")

    anyio.run(run)


@pytest.mark.anyio
async def test_view_version_is_none_cold_and_changes_only_at_a_compaction() -> None:
    layer = SummarizingChatStorage(InMemoryChatStorage(), trigger_at=2, keep_last=1)
    assert layer.view_version(KEY) is None
    await layer.save(KEY, SYSTEM)
    await layer.fetch(KEY)
    before = layer.view_version(KEY)
    assert before is not None
    await layer.save_messages(KEY, messages_for("user", 3, 1))
    await layer.fetch(KEY)
    assert layer.view_version(KEY) == before  # a save is not a compaction
    for n in range(2, 6):
        await layer.save_messages(KEY, messages_for("user", 3, n) + messages_for("assistant", 3, n))
    await layer.fetch(KEY)
    assert layer.summaries_made >= 1
    assert layer.view_version(KEY) != before


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(step, min_size=1, max_size=40),
    options=budgets.filter(lambda o: o.get("summaries") != "memory"),
    restart=st.booleans(),
)
def test_property_the_view_is_checkpoint_plus_the_raw_suffix(
    steps: list[tuple[str, int]], options: dict[str, Any], restart: bool
) -> None:
    """Nothing is lost: after the head (pinned prompt, summary, verbatim copies: the stored
    checkpoint) the view is exactly the newest raw messages; in the head only the summary is
    marked, the copies are the raw messages; a restarted instance serves the same view."""

    async def run() -> None:
        base = InMemoryChatStorage()
        layer = SummarizingChatStorage(base, **options)
        await layer.save(KEY, SYSTEM)
        for n, (kind, size) in enumerate(steps):
            await layer.save_messages(KEY, messages_for(kind, size, n))
            view = await layer.fetch(KEY)
            checkpoint = await base.load_checkpoint(KEY)
            head = len(checkpoint.messages) if checkpoint is not None else 0
            # Only the summary itself is marked; verbatim copies come back as stored raw.
            assert not any(m.is_summary for m in view[head:])
            raw = await base.fetch(KEY)
            by_id = {m.id: m for m in raw}
            for m in view[:head]:
                if not m.is_summary:
                    assert m.id in by_id
                    assert m == by_id[m.id] or m.metadata["chatlayers"].get("trimmed_chars")
            tail = [m.id for m in view[head:]]
            assert tail == [m.id for m in raw[len(raw) - len(tail) :]]
            check_tool_pairs(view)
        if restart:
            again = SummarizingChatStorage(base, **options)
            assert await again.fetch(KEY) == view

    anyio.run(run)

"""Background summarizing: a save returns once the raw write is done, the summary
runs in the layer's task group, one per key, and closing loses nothing. No sleeps: events."""

from __future__ import annotations

import anyio
import pytest

from storage.abilities import CheckpointStorage, find_ability
from storage.errors import ConfigError
from storage.layers.summarizing import SummarizingChatStorage
from storage.message import ChatKey, ChatMessage
from storage.stores.memory import InMemoryChatStorage
from tests.layers.summarizing.test_layer import FakeSummarizer, pairs

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")


def gated() -> FakeSummarizer:
    fake = FakeSummarizer()
    fake.gate = anyio.Event()
    return fake


@pytest.mark.parametrize("summaries", ["store", "memory"])
async def test_a_crossing_save_returns_before_the_summary_and_fetch_serves_meanwhile(
    summaries: str,
) -> None:
    fake = gated()
    base = InMemoryChatStorage()
    layer = SummarizingChatStorage(
        base,
        fake,
        trigger_at=2,
        keep_last=1,
        background=True,
        summaries=summaries,  # type: ignore[arg-type]
    )
    async with layer:
        first = await layer.save_messages(KEY, pairs(2))
        assert await layer.fetch(KEY) == first  # at the trigger: active, nothing due
        with anyio.fail_after(5):  # a guard against a hang, not a timing assertion
            crossing = await layer.save_messages(KEY, pairs(1, start=2))  # 6 > 4
            # Fetch serves the current view plus the new messages, without waiting (memory
            # mode: this first fetch over the trigger starts the summary).
            assert await layer.fetch(KEY) == first + crossing
            await fake.started.wait()  # the summary runs, blocked on its gate
        assert len(fake.calls) == 1
        assert await layer.fetch(KEY) == first + crossing
        later = await layer.save(KEY, ChatMessage("user", "q9"))
        assert len(fake.calls) == 1  # one summary per key at a time
        assert (await layer.fetch(KEY))[-1] == later[0]
        assert fake.gate is not None
        fake.gate.set()
        with anyio.fail_after(5):
            await layer.drain()
        view = await layer.fetch(KEY)
        assert view[0].is_summary
        assert view[-1].id == later[0].id  # the save made meanwhile is kept after the summary
        assert layer.summaries_made == 1
        assert [m.id for m in await base.fetch(KEY)] == [m.id for m in first + crossing + later]


async def test_close_cancels_a_running_summary_and_loses_nothing() -> None:
    fake = gated()
    base = InMemoryChatStorage()
    layer = SummarizingChatStorage(base, fake, trigger_at=2, keep_last=1, background=True)
    saved: list[ChatMessage] = []
    async with layer.background_tasks():
        saved += await layer.save_messages(KEY, pairs(2))
        await layer.fetch(KEY)
        saved += await layer.save_messages(KEY, pairs(2, start=2))
        with anyio.fail_after(5):
            await fake.started.wait()
    # The block ended with the summary still blocked: it was cancelled, cleanly.
    assert layer.summaries_made == 0
    assert [m.id for m in await base.fetch(KEY)] == [m.id for m in saved]
    store = find_ability(base, CheckpointStorage)
    assert store is not None
    assert await store.load_checkpoint(KEY) is None
    assert await store.acquire_lease(KEY, "another worker", 30)  # the lease was given back
    await layer.aclose()


async def test_using_a_background_layer_without_entering_it_is_a_clear_error() -> None:
    base = InMemoryChatStorage()
    layer = SummarizingChatStorage(base, FakeSummarizer(), trigger_at=2, background=True)
    with pytest.raises(ConfigError, match="async with layer"):
        await layer.save(KEY, ChatMessage("user", "hi"))
    with pytest.raises(ConfigError, match="async with layer"):
        await layer.fetch(KEY)
    head = await base.head(KEY)
    with pytest.raises(ConfigError, match="async with layer"):
        await layer.save_messages_if(KEY, pairs(1), expected_version=head.version)
    assert await base.fetch(KEY) == []  # refused before anything was written
    async with layer:
        with pytest.raises(ConfigError, match="already open"):
            await layer.__aenter__()


async def test_a_failing_background_summary_is_counted_and_retried_never_raised() -> None:
    fake = FakeSummarizer()
    fake.fail = RuntimeError("model down")
    layer = SummarizingChatStorage(
        InMemoryChatStorage(), fake, trigger_at=2, keep_last=1, background=True
    )
    async with layer:
        await layer.save_messages(KEY, pairs(2))
        await layer.fetch(KEY)
        await layer.save_messages(KEY, pairs(1, start=2))
        await layer.drain()
        assert layer.summary_failures == 1
        assert len(await layer.fetch(KEY)) == 6  # nothing dropped
        fake.fail = None
        await layer.save(KEY, ChatMessage("user", "again"))
        await layer.drain()
        assert (await layer.fetch(KEY))[0].is_summary


async def test_two_background_instances_make_one_summary_fleet_wide() -> None:
    fake = gated()
    base = InMemoryChatStorage()
    a, b = (
        SummarizingChatStorage(base, fake, trigger_at=2, keep_last=1, background=True)
        for _ in range(2)
    )
    async with a.background_tasks(), b.background_tasks():
        await a.save_messages(KEY, pairs(2))
        await a.fetch(KEY)
        await b.fetch(KEY)
        await a.save_messages(KEY, pairs(1, start=2))  # a crosses: its summary starts
        with anyio.fail_after(5):
            await fake.started.wait()
        await b.save(KEY, ChatMessage("user", "from b"))  # b is due too: the lease is held
        with anyio.fail_after(5):
            await b.drain()
        assert b.lease_busy == 1
        assert len(fake.calls) == 1
        assert fake.gate is not None
        fake.gate.set()
        with anyio.fail_after(5):
            await a.drain()
        view_a, view_b = await a.fetch(KEY), await b.fetch(KEY)
        assert view_a == view_b
        assert view_a[0].is_summary
        assert view_a[-1].text == "from b"  # b's save is kept after a's summary
        assert len(fake.calls) == 1  # one summary for the crossing, fleet-wide

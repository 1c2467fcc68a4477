"""Background summaries under faults, over one SQLite file with two instances: saves that
land while a summary is in flight, and a lease holder that died."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from storage import open_storage
from storage.abilities import CheckpointStorage, find_ability
from storage.layers.summarizing import SummarizingChatStorage
from storage.message import ChatKey, ChatMessage
from tests.layers.summarizing.test_layer import FakeSummarizer, pairs

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")


def over_budget(view: list[ChatMessage], trigger_at: int) -> bool:
    lead = 1 if view and view[0].role == "system" else 0
    return len(view) - lead > trigger_at * 2


async def test_saves_landing_during_a_background_summary_are_summarized_after_it(
    tmp_path: Path,
) -> None:
    """The saves made while a background summary runs (here through another instance, whose
    own attempt finds the lease held) push the view over the budget again: once the summary
    is installed, the holder summarizes again, so the view does not stay over the budget
    until some later save."""
    url = f"sqlite:///{tmp_path / 'chats.db'}"
    fake = FakeSummarizer()
    fake.gate = anyio.Event()
    a = SummarizingChatStorage(
        open_storage(url).inner, fake, trigger_at=3, keep_last=1, background=True
    )
    b = SummarizingChatStorage(
        open_storage(url).inner, fake, trigger_at=3, keep_last=1, background=True
    )
    async with a, b:
        await a.save_messages(KEY, pairs(3))
        await a.fetch(KEY)
        await a.save_messages(KEY, pairs(1, start=3))  # 8 > 6: a's summary starts
        with anyio.fail_after(5):
            await fake.started.wait()
        await b.fetch(KEY)
        for n in range(4, 9):  # five more pairs through b while a's call runs
            await b.save_messages(KEY, pairs(1, start=n))
        with anyio.fail_after(5):
            await b.drain()
        assert b.lease_busy >= 1
        fake.gate.set()
        with anyio.fail_after(5):
            await a.drain()
        view = await a.fetch(KEY)
        with anyio.fail_after(5):
            await a.drain()
            await b.drain()
        assert not over_budget(await a.fetch(KEY), 3), [m.text for m in view]
        assert not over_budget(await b.fetch(KEY), 3)
        store = find_ability(a.inner, CheckpointStorage)
        assert store is not None
        assert len((await store.fetch_since(KEY, 0)).messages) == 18  # nothing lost
        assert len(fake.calls) == (await store.load_checkpoint(KEY)).version  # type: ignore[union-attr]


@pytest.mark.parametrize("summaries", ["store", "memory"])
async def test_own_saves_during_a_background_summary_are_summarized_after_it(
    tmp_path: Path, summaries: str
) -> None:
    """A worker's own saves made while its background summary runs are in its view, not in
    what the call summarized: the view was served over the budget (12 messages after the
    summary for a budget of 6) until the next save; now the task summarizes again, and a
    second instance over the same file serves the same view with no call of its own."""
    url = f"sqlite:///{tmp_path / 'chats.db'}"
    fake = FakeSummarizer()
    fake.gate = anyio.Event()
    a = SummarizingChatStorage(
        open_storage(url).inner,
        fake,
        trigger_at=3,
        keep_last=1,
        background=True,
        summaries=summaries,  # type: ignore[arg-type]
    )
    async with a:
        await a.save_messages(KEY, pairs(3))
        await a.fetch(KEY)
        await a.save_messages(KEY, pairs(1, start=3))  # 8 > 6
        await a.fetch(KEY)  # (memory mode: a fetch over the budget starts it)
        with anyio.fail_after(5):
            await fake.started.wait()
        for n in range(4, 9):  # five more pairs while the call runs
            await a.save_messages(KEY, pairs(1, start=n))
            await a.fetch(KEY)
        fake.gate.set()
        with anyio.fail_after(5):
            await a.drain()
        view = await a.fetch(KEY)
        with anyio.fail_after(5):
            await a.drain()
        view = await a.fetch(KEY)
        assert not over_budget(view, 3), [m.text for m in view]
        assert len(fake.calls) == 2
        if summaries == "store":
            b = SummarizingChatStorage(
                open_storage(url).inner, fake, trigger_at=3, keep_last=1, background=True
            )
            async with b:
                assert await b.fetch(KEY) == view
                await b.drain()
            assert len(fake.calls) == 2

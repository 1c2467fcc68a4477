"""One summarizer call per crossing also between the tasks of one instance: the lease is
held per attempt, so a store that grants it again to the owner holding it does not let a
second task of the same instance summarize the same crossing."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from storage import open_storage
from storage.layers.summarizing import SummarizingChatStorage
from storage.message import ChatKey
from tests.layers.summarizing.test_layer import FakeSummarizer, pairs

pytestmark = pytest.mark.anyio

K1, K2 = ChatKey("u", "s1", "a"), ChatKey("u", "s2", "a")


def gated() -> FakeSummarizer:
    fake = FakeSummarizer()
    fake.gate = anyio.Event()
    return fake


async def test_a_key_evicted_while_its_summary_is_queued_is_summarized_once(
    tmp_path: Path,
) -> None:
    """``max_buffers=1``: K1's state is evicted between its summary being scheduled and the
    task starting, then loaded again and scheduled again. Before, both tasks were granted
    the lease (same owner) and called the summarizer: two calls, one checkpoint conflict."""
    url = f"sqlite:///{tmp_path / 'chats.db'}"
    fake = gated()
    layer = SummarizingChatStorage(
        open_storage(url).inner, fake, trigger_at=3, keep_last=1, background=True, max_buffers=1
    )
    async with layer:
        await layer.save_messages(K2, pairs(1))
        await layer.save_messages(K1, pairs(4))
        await layer.fetch(K1)  # cold and due: its summary is scheduled
        await layer.fetch(K2)  # K1's state is evicted before the task ran
        await layer.fetch(K1)  # cold again: scheduled again
        with anyio.fail_after(5):
            await fake.started.wait()
        for _ in range(10):
            await anyio.lowlevel.checkpoint()
        assert len(fake.calls) == 1
        assert fake.gate is not None
        fake.gate.set()
        with anyio.fail_after(5):
            await layer.drain()
        assert layer.checkpoint_conflicts == 0
        other = SummarizingChatStorage(
            open_storage(url).inner, fake, trigger_at=3, keep_last=1, background=True
        )
        async with other:  # a second instance serves that summary, no call of its own
            view = await other.fetch(K1)
            await other.drain()
        assert view[0].is_summary
        assert await layer.fetch(K1) == view
        assert len(fake.calls) == 1

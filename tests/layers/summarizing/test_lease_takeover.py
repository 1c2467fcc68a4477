"""A worker that died holding a key's summarizing lease (SIGKILL: never given back), and a
worker over the same SQLite file that only fetches."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from storage.abilities import CheckpointStorage, find_ability
from storage.layers.summarizing import SummarizingChatStorage
from storage.message import ChatKey
from storage.stores.sqlite import SQLiteChatStorage
from tests.layers.summarizing.test_background_faults import over_budget
from tests.layers.summarizing.test_layer import FakeSummarizer, pairs

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")


class Clock:
    """Seconds, moved by hand: the store's (lease expiry) and the layer's (its retry)."""

    def __init__(self) -> None:
        self.now = 2_000_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("background", [False, True])
async def test_a_reader_summarizes_once_a_dead_holders_lease_ran_out(
    tmp_path: Path, background: bool
) -> None:
    """Worker A died holding the key's lease mid-summary (SIGKILL: never given back). B only
    fetches: its first fetch finds the lease held and serves the raw view; once the lease has
    run out, B's next fetch makes the summary (before: no fetch ever tried again, the view
    stayed over the budget until someone saved)."""
    clock = Clock()
    path = tmp_path / "chats.db"
    writer = SQLiteChatStorage(path, clock=clock)
    fake = FakeSummarizer()
    a = SummarizingChatStorage(writer, fake, trigger_at=3, keep_last=1, lease_ttl=30)
    await a.save_messages(KEY, pairs(4))  # a plain write: A has not read the key
    store = find_ability(writer, CheckpointStorage)
    assert store is not None
    assert await store.acquire_lease(KEY, "worker A, killed mid-summary", 30)
    b = SummarizingChatStorage(
        SQLiteChatStorage(path, clock=clock),
        fake,
        trigger_at=3,
        keep_last=1,
        lease_ttl=30,
        background=background,
        clock=clock,
    )
    async with b:
        assert len(await b.fetch(KEY)) == 8  # the lease is held: the raw view
        await b.drain()
        assert b.lease_busy == 1
        assert fake.calls == []
        clock.now += 10
        assert len(await b.fetch(KEY)) == 8  # still held: no call
        await b.drain()
        assert fake.calls == []
        clock.now += 21  # A's lease has run out
        await b.fetch(KEY)
        with anyio.fail_after(5):
            await b.drain()
        assert len(fake.calls) == 1
        view = await b.fetch(KEY)
        assert view[0].is_summary
        assert not over_budget(view, 3)
        assert len((await store.fetch_since(KEY, 0)).messages) == 8  # nothing lost
    await writer.aclose()


async def test_a_lease_shorter_than_the_timeout_is_refused(tmp_path: Path) -> None:
    """With ``lease_ttl <= timeout`` a call the timeout still allows outlives its lease, a
    second worker takes the key and calls the summarizer again for the same crossing (the
    example configuration says ``lease_ttl`` > timeout; nothing enforced it)."""
    from storage import open_storage
    from storage.errors import ConfigError

    with pytest.raises(ConfigError, match="lease_ttl must be > timeout"):
        SummarizingChatStorage(
            SQLiteChatStorage(tmp_path / "a.db"), FakeSummarizer(), timeout=60, lease_ttl=30
        )
    url = f"summarize?timeout=60&lease_ttl=60::sqlite:///{tmp_path / 'b.db'}"
    with pytest.raises(ConfigError, match="lease_ttl must be > timeout"):
        open_storage(url)
    layer = SummarizingChatStorage(
        SQLiteChatStorage(tmp_path / "c.db"), FakeSummarizer(), timeout=60, lease_ttl=61
    )
    assert layer.lease_ttl == 61
    await layer.aclose()

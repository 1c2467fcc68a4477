"""``verify --views`` reads each conversation a constant number of times, whatever its
length: the provenance of every reply is rebuilt from one read of the key (its records, its
timeline; each checkpoint version once), not from a read per reply (which made verifying a
conversation quadratic in its length). Counted at the stores, not timed."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from storage.abilities import TimeTravelStorage, find_ability
from storage.layers.summarizing import SummarizingChatStorage
from storage.message import ChatKey, ChatMessage
from storage.migrate import migrate, verify
from storage.stores.memory import InMemoryChatStorage
from tests.migrate.test_history import KEY, PLAIN, converse, history

pytestmark = pytest.mark.anyio

READS = ("fetch_records", "fetch_timeline", "load_checkpoint")


def counting(store: Any, reads: Counter[str]) -> Any:
    """``store`` with each of its :data:`READS` counted in ``reads``."""
    for name in READS:
        method = getattr(store, name)

        async def counted(*args: Any, _method: Any = method, _name: str = name, **kw: Any) -> Any:
            reads[_name] += 1
            return await _method(*args, **kw)

        setattr(store, name, counted)
    return store


def stack(store: InMemoryChatStorage) -> SummarizingChatStorage:
    return SummarizingChatStorage(store, trigger_at=3, keep_last=1)


async def verify_reads(turns: int) -> tuple[Counter[str], int]:
    """The store reads of ``verify(views=True)`` of one conversation of ``turns`` replies
    (each after a fetch), and how many checkpoint versions it has."""
    reads: Counter[str] = Counter()
    source_store, target_store = InMemoryChatStorage(), InMemoryChatStorage()
    source, target = stack(source_store), stack(target_store)
    await converse(source, KEY, range(turns))
    await migrate(source, target)
    versions = len([v async for v in _versions(source_store, KEY)])
    counting(source_store, reads)
    counting(target_store, reads)
    report = await verify(source, target, views=True)
    assert report.equal, report.difference
    assert report.views == 1
    assert report.summarized_views == 1
    return reads, versions


async def _versions(store: InMemoryChatStorage, key: ChatKey) -> Any:
    number = 1
    while await store.load_checkpoint(key, version=number) is not None:
        yield number
        number += 1


async def test_verify_views_reads_a_conversation_once_whatever_its_length() -> None:
    short, short_versions = await verify_reads(20)
    long, long_versions = await verify_reads(40)
    assert long_versions > short_versions  # more summaries: the conversation did grow
    # Records and timeline: the same few reads at 40 replies as at 20 (read per reply
    # before: 2 x 20 more of each).
    assert long["fetch_records"] == short["fetch_records"] <= 8
    assert long["fetch_timeline"] == short["fetch_timeline"] <= 8
    # Each version once per side for the snapshot, at most once more for the provenance.
    assert long["load_checkpoint"] <= 4 * long_versions + 8


async def test_provenance_read_once_is_the_provenance_read_per_reply() -> None:
    """Rebuilt inside ``reading_provenance`` (one read of the key) or outside (a read per
    reply), every reply answers the same; rewinds included."""
    layer = stack(InMemoryChatStorage())
    await history(layer)
    travel = find_ability(layer, TimeTravelStorage)
    assert travel is not None
    for key in (KEY, PLAIN):
        replies = [m.id for m in (await travel.fetch_timeline(key)).messages]
        alone = [await layer.provenance(key, reply) for reply in replies]
        with layer.reading_provenance():
            shared = [await layer.provenance(key, reply) for reply in replies]
        assert shared == alone
        assert sum(p is not None for p in alone) >= 8
        assert any(p is not None and p.omitted for p in alone)


async def test_a_reply_saved_while_reading_is_known() -> None:
    """A reply linked through the layer inside the block drops the kept read: its view is
    found, not missed for a record the kept read lacked."""
    layer = stack(InMemoryChatStorage())
    await converse(layer, KEY, range(6))
    with layer.reading_provenance():
        assert await layer.provenance(KEY, "assistant-a5") is not None
        await layer.save(KEY, ChatMessage("user", "one more", id="late-u"))
        view = await layer.fetch(KEY)
        await layer.save(KEY, ChatMessage("assistant", "late answer", id="late-a"))
        found = await layer.provenance(KEY, "late-a")
    assert found is not None
    assert list(found.messages) == view

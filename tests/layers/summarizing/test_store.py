"""SummarizingChatStorage with ``summaries="store"``: checkpoints beside the raw record,
coherent views across instances, leases, ``on_error``, ``compact``, forwarded abilities and
bounded state. Unit tests over the memory store (the reference store)."""

from __future__ import annotations

import itertools
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from storage.abilities import (
    CheckpointStorage,
    ListableStorage,
    RecordStorage,
    ReplaceableStorage,
    RetentionStorage,
    SearchableStorage,
    SequencedStorage,
    SessionListing,
    find_ability,
)
from storage.errors import ConfigError, ConflictError, InvalidArgumentError, SummarizerError
from storage.history import check_tool_pairs
from storage.layers.summarizing import SummarizingChatStorage
from storage.layers.summarizing.cutting import view_form
from storage.layers.summarizing.header import framed
from storage.layers.transforming import TransformingChatStorage
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.stores.memory import InMemoryChatStorage
from tests.layers.summarizing.test_layer import FakeSummarizer, pairs
from tests.test_protocol import Recorder

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")


class Clock:
    """A clock tests move by hand (seconds)."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def layer_over(
    store: Any, fake: FakeSummarizer, trigger_at: int = 2, keep_last: int = 1, **kw: Any
) -> SummarizingChatStorage:
    return SummarizingChatStorage(store, fake, trigger_at=trigger_at, keep_last=keep_last, **kw)


# Modes -------------------------------------------------------------------------------------


def test_summaries_default_to_store_when_the_stack_has_checkpoints() -> None:
    store = InMemoryChatStorage()
    assert layer_over(store, FakeSummarizer()).summaries == "store"
    upper = TransformingChatStorage(store, lambda m, k: m)
    assert layer_over(upper, FakeSummarizer()).summaries == "store"
    assert layer_over(store, FakeSummarizer(), summaries="memory").summaries == "memory"
    # A store without the ability: the default falls back, an explicit "store" is refused.
    assert layer_over(Recorder(), FakeSummarizer()).summaries == "memory"
    with pytest.raises(ConfigError, match="summaries='store' needs summary checkpoints"):
        layer_over(Recorder(), FakeSummarizer(), summaries="store")
    with pytest.raises(ConfigError, match="on_error"):
        layer_over(store, FakeSummarizer(), on_error="ignore")
    with pytest.raises(ConfigError, match="coherence"):
        layer_over(store, FakeSummarizer(), coherence="none")
    with pytest.raises(ValueError, match="lease_ttl"):
        layer_over(store, FakeSummarizer(), lease_ttl=0)


# The record and the view -----------------------------------------------------------------


async def test_summary_is_a_checkpoint_beside_the_untouched_raw_record() -> None:
    store = InMemoryChatStorage()
    fake = FakeSummarizer()
    layer = layer_over(store, fake)
    stored = await layer.save_messages(KEY, pairs(3))
    view = await layer.fetch(KEY)
    assert len(fake.calls) == 1
    assert view[0].is_summary
    assert view[1:] == stored[-2:]
    assert await store.fetch(KEY) == stored  # the raw record is never written by summarizing
    checkpoint = await store.load_checkpoint(KEY)
    assert checkpoint is not None
    assert view_form(checkpoint.messages) == view[:1]  # as the view shows it: framed
    assert checkpoint.messages[0].text == "summary of 4 messages"  # stored as made
    tail = await store.fetch_since(KEY, 0)
    assert checkpoint.covers_to == tail.seqs[3]  # q0 a0 q1 a1 covered; q2 a2 kept
    assert checkpoint.summarizer == "FakeSummarizer"
    assert layer.summaries_made == 1


async def test_restarted_worker_serves_the_same_view_with_no_summarizer_call() -> None:
    store = InMemoryChatStorage()
    fake = FakeSummarizer()
    layer = layer_over(store, fake)
    await layer.save_messages(KEY, pairs(3))
    await layer.fetch(KEY)
    await layer.save(KEY, ChatMessage("user", "after the summary"))
    before = await layer.fetch(KEY)
    restarted = layer_over(store, fake)
    assert await restarted.fetch(KEY) == before
    assert await restarted.fetch(KEY, limit=1) == [before[0], before[-1]]  # + the summary
    assert len(fake.calls) == 1
    assert restarted.checkpoints_loaded == 1
    assert restarted.summaries_made == 0


async def test_checkpoint_passes_through_the_transforming_layer_below() -> None:
    store = InMemoryChatStorage()
    fake = FakeSummarizer()

    def upper(message: ChatMessage, key: ChatKey) -> ChatMessage:
        return ChatMessage(
            message.role, message.text.upper(), id=message.id, metadata=message.metadata
        )

    layer = layer_over(TransformingChatStorage(store, upper), fake)
    await layer.save_messages(KEY, pairs(3))
    view = await layer.fetch(KEY)
    assert view[0].text == framed("SUMMARY OF 4 MESSAGES")  # transformed on its way
    checkpoint = await store.load_checkpoint(KEY)
    assert checkpoint is not None
    assert checkpoint.messages[0].text == "SUMMARY OF 4 MESSAGES"


async def test_saves_after_the_checkpoint_grow_the_view_at_its_end() -> None:
    fake = FakeSummarizer()
    layer = layer_over(InMemoryChatStorage(), fake, trigger_at=3)
    await layer.save_messages(KEY, pairs(4))
    first = await layer.fetch(KEY)
    views = [first]
    for n in range(3):  # 3 -> 6 messages: never more than 6
        await layer.save(KEY, ChatMessage("user", f"more {n}"))
        views.append(await layer.fetch(KEY))
    assert len(fake.calls) == 1
    for shorter, longer in itertools.pairwise(views):
        assert longer[: len(shorter)] == shorter  # only grows at its end


# Coherence -------------------------------------------------------------------------------


async def test_two_instances_see_each_others_saves_checkpoints_and_deletes() -> None:
    store = InMemoryChatStorage()
    fake = FakeSummarizer()
    a = layer_over(store, fake, trigger_at=3)
    b = layer_over(store, fake, trigger_at=3)
    await a.save_messages(KEY, pairs(2))
    assert [m.text for m in await a.fetch(KEY)] == ["q0", "a0", "q1", "a1"]
    assert a.is_active(KEY)
    await b.save(KEY, ChatMessage("user", "from b"))
    assert (await a.fetch(KEY))[-1].text == "from b"  # the cached view saw b's save
    await b.fetch(KEY)
    await b.save_messages(KEY, pairs(2, start=5))  # b's view passes 6: b summarizes
    assert len(fake.calls) == 1
    view_b = await b.fetch(KEY)
    assert view_b[0].is_summary
    assert await a.fetch(KEY) == view_b  # a picked up b's checkpoint, no call of its own
    assert len(fake.calls) == 1
    await b.delete(KEY)
    assert await a.fetch(KEY) == []
    await b.save_messages(KEY, pairs(1, start=9))
    assert [m.text for m in await a.fetch(KEY)] == ["q9", "a9"]
    await b.delete_user("u")
    assert await a.fetch(KEY) == []
    assert await a.fetch(KEY, limit=3) == []


async def test_process_coherence_skips_the_head_read() -> None:
    store = InMemoryChatStorage()
    fake = FakeSummarizer()
    pinned = layer_over(store, fake, trigger_at=3, coherence="process")
    other = layer_over(store, fake, trigger_at=3)
    await pinned.save_messages(KEY, pairs(2))
    before = await pinned.fetch(KEY)
    await other.save(KEY, ChatMessage("user", "elsewhere"))
    assert await pinned.fetch(KEY) == before  # documented: pinned conversations only
    await pinned.save(KEY, ChatMessage("assistant", "here"))
    assert [m.text for m in await pinned.fetch(KEY)][-1] == "here"


async def test_a_save_racing_a_read_back_is_neither_lost_nor_doubled() -> None:
    store = InMemoryChatStorage()
    fake = FakeSummarizer()
    layer = layer_over(store, fake, trigger_at=10)
    await layer.save_messages(KEY, pairs(2))
    await layer.fetch(KEY)
    other = layer_over(store, fake, trigger_at=10)
    async with anyio.create_task_group() as tg:
        for n in range(5):
            tg.start_soon(layer.save, KEY, ChatMessage("user", f"mine {n}"))
            tg.start_soon(other.save, KEY, ChatMessage("user", f"theirs {n}"))
            tg.start_soon(layer.fetch, KEY)
    assert await layer.fetch(KEY) == await store.fetch(KEY)


# One summary per crossing, leases -------------------------------------------------------


async def test_two_instances_make_one_summary_per_crossing() -> None:
    store = InMemoryChatStorage()
    fake = FakeSummarizer()
    workers = [layer_over(store, fake, trigger_at=2) for _ in range(2)]
    for n in range(12):
        worker = workers[n % 2]
        await worker.fetch(KEY)
        await worker.save_messages(KEY, pairs(1, start=n))
    views = [await w.fetch(KEY) for w in workers]
    checkpoint = await store.load_checkpoint(KEY)
    assert checkpoint is not None
    assert (
        len(fake.calls) == checkpoint.version
    )  # every call made the one checkpoint of its crossing
    assert sum(w.summaries_made for w in workers) == checkpoint.version
    assert views[0] == views[1]
    assert views[0][0].is_summary


async def test_a_held_lease_means_serve_checkpoint_and_tail_and_a_dead_holder_loses_it() -> None:
    clock = Clock()
    store = InMemoryChatStorage(clock=clock)
    fake = FakeSummarizer()
    layer = layer_over(store, fake, lease_ttl=30)
    await layer.save_messages(KEY, pairs(3))
    assert await store.acquire_lease(KEY, "a worker that died", 30)
    view = await layer.fetch(KEY)
    assert fake.calls == []
    assert [m.text for m in view] == [m.text for m in await store.fetch(KEY)]
    assert layer.lease_busy == 1
    await layer.save(KEY, ChatMessage("user", "q3"))
    assert fake.calls == []
    clock.now += 31  # the dead holder's lease expires
    await layer.save(KEY, ChatMessage("assistant", "a3"))
    assert len(fake.calls) == 1
    assert (await layer.fetch(KEY))[0].is_summary
    # the lease was given back: another owner can take it at once
    assert await store.acquire_lease(KEY, "next", 30)


async def test_concurrent_cold_fetches_make_one_call_and_saves_meanwhile_are_kept() -> None:
    store = InMemoryChatStorage()
    fake = FakeSummarizer()
    fake.gate = anyio.Event()
    layer = layer_over(store, fake)
    await layer.save_messages(KEY, pairs(3))
    views: list[list[ChatMessage]] = []
    late: list[ChatMessage] = []

    async def fetch() -> None:
        views.append(await layer.fetch(KEY))

    async with anyio.create_task_group() as tg:
        tg.start_soon(fetch)
        tg.start_soon(fetch)
        await fake.started.wait()
        late += await layer.save(KEY, ChatMessage("user", "during the call"))
        assert (await layer.fetch(KEY))[-1] == late[0]  # fetches never wait for the model
        fake.gate.set()
    assert len(fake.calls) == 1
    assert views[0] == views[1]
    final = await layer.fetch(KEY)
    assert final[0].is_summary
    assert final[-1] == late[0]


# on_error ----------------------------------------------------------------------------------


async def test_raise_mode_keeps_the_seed_contract() -> None:
    store = InMemoryChatStorage()
    fake = FakeSummarizer()
    fake.fail = ConnectionError("model down")
    layer = layer_over(store, fake)
    stored = await layer.save_messages(KEY, pairs(3))
    with pytest.raises(SummarizerError) as info:
        await layer.fetch(KEY)
    assert isinstance(info.value.__cause__, ConnectionError)
    assert not layer.is_active(KEY)  # cold: the next fetch tries again
    with pytest.raises(SummarizerError):
        await layer.fetch(KEY)
    assert len(fake.calls) == 2
    fake.fail = None
    view = await layer.fetch(KEY)
    assert view[0].is_summary
    fake.fail = ConnectionError("down again")
    await layer.save_messages(KEY, [ChatMessage("user", "q3"), ChatMessage("assistant", "a3")])
    with pytest.raises(SummarizerError):  # 5 messages after the leading summary > 4
        await layer.save(KEY, ChatMessage("user", "q4"))
    assert [m.text for m in (await layer.fetch(KEY))[-3:]] == ["q3", "a3", "q4"]  # all kept
    assert await store.fetch(KEY) == [*stored, *(await store.fetch(KEY))[6:]]
    assert len(await store.fetch(KEY)) == 9
    assert layer.summary_failures == 3


async def test_fallback_serves_the_newest_raw_window_then_retries_with_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    store = InMemoryChatStorage()
    fake = FakeSummarizer()
    fake.fail = ConnectionError("model down")
    layer = layer_over(
        store, fake, on_error="fallback", clock=clock, retry_backoff=10, retry_max=40
    )
    messages = [
        *pairs(2),
        ChatMessage("user", "book"),
        ChatMessage("assistant", None, (ToolCall("c1", "book", "{}"),)),
        ChatMessage("tool", "ok", tool_call_id="c1"),
        ChatMessage("assistant", "booked"),
    ]
    await layer.save_messages(KEY, messages)
    with caplog.at_level(logging.DEBUG, logger="storage.layers.summarizing"):
        view = await layer.fetch(KEY)  # never raises
        # the newest trigger_at * 2 = 4 messages, tool call and result together
        assert [m.text for m in view] == ["book", "", "ok", "booked"]
        check_tool_pairs(view)
        # The turn's request, then its newest group that fits: starts right, pair-safe.
        assert [m.text for m in await layer.fetch(KEY, limit=2)] == ["book", "booked"]
        assert len(fake.calls) == 1
        await layer.save(KEY, ChatMessage("user", "q9"))  # within the backoff: no call
        await layer.fetch(KEY)
        assert len(fake.calls) == 1
        clock.now += 10
        await layer.save(KEY, ChatMessage("assistant", "a9"))  # retried: fails again
        assert len(fake.calls) == 2
        clock.now += 10  # the second delay is 20 s
        await layer.fetch(KEY)
        assert len(fake.calls) == 2
        clock.now += 10
        fake.fail = None
        view = await layer.fetch(KEY)  # a fetch retries too, and now it works
    assert len(fake.calls) == 3
    assert view[0].is_summary
    assert layer.summary_failures == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # logged once per key
    assert len(await store.fetch(KEY)) == 10  # nothing raw lost


async def test_fallback_with_a_checkpoint_serves_checkpoint_and_whole_tail() -> None:
    clock = Clock()
    store = InMemoryChatStorage()
    fake = FakeSummarizer()
    layer = layer_over(store, fake, on_error="fallback", clock=clock)
    await layer.save_messages(KEY, pairs(3))
    await layer.fetch(KEY)
    fake.fail = TimeoutError("slow model")
    saved = []
    for n in range(3, 7):
        saved += await layer.save_messages(KEY, pairs(1, start=n))  # never raises
    view = await layer.fetch(KEY)
    assert view[0].is_summary
    assert view[-len(saved) :] == saved  # every message after the checkpoint is served
    restarted = layer_over(store, fake, on_error="fallback", clock=clock)
    assert await restarted.fetch(KEY) == view


# compact -----------------------------------------------------------------------------------


async def test_compact_summarizes_now_and_installs_a_given_summary() -> None:
    store = InMemoryChatStorage()
    fake = FakeSummarizer()
    layer = layer_over(store, fake, trigger_at=10)
    stored = await layer.save_messages(KEY, pairs(2))
    view = await layer.compact(KEY)  # below the trigger, summarized anyway
    assert len(fake.calls) == 1
    assert view[0].is_summary
    assert view[1:] == stored[-2:]
    assert await layer.fetch(KEY) == view
    view = await layer.compact(KEY, summary="The user asked about q0 and q1.")
    assert [m.text for m in view] == [framed("The user asked about q0 and q1.")]
    assert view[0].is_summary
    assert view[0].role == "system"
    restarted = layer_over(store, fake, trigger_at=10)
    assert await restarted.fetch(KEY) == view
    new = await restarted.save(KEY, ChatMessage("user", "next"))
    assert await layer.fetch(KEY) == [*view, *new]
    given = ChatMessage("assistant", "plain message as summary")
    view = await layer.compact(KEY, given)
    assert view[0].is_summary
    assert view[0].id == given.id
    assert await store.fetch(KEY) == [*stored, *new]  # raw untouched
    with pytest.raises(InvalidArgumentError, match="holds no messages"):
        await layer.compact(ChatKey("u", "s", "empty"))


async def test_compact_refuses_while_another_worker_holds_the_lease() -> None:
    store = InMemoryChatStorage()
    layer = layer_over(store, FakeSummarizer())
    await layer.save_messages(KEY, pairs(2))
    assert await store.acquire_lease(KEY, "busy worker", 60)
    with pytest.raises(ConflictError, match="another worker"):
        await layer.compact(KEY, summary="x")


async def test_compact_in_memory_mode() -> None:
    fake = FakeSummarizer()
    layer = layer_over(InMemoryChatStorage(), fake, trigger_at=10, summaries="memory")
    await layer.save_messages(KEY, pairs(2))
    view = await layer.compact(KEY)
    assert view[0].is_summary
    assert await layer.fetch(KEY) == view
    assert [m.text for m in await layer.compact(KEY, summary="gist")] == [framed("gist")]
    fake.fail = RuntimeError("down")
    fallback = layer_over(InMemoryChatStorage(), fake, summaries="memory", on_error="fallback")
    await fallback.save_messages(KEY, pairs(2))
    with pytest.raises(SummarizerError):  # an explicit compaction always reports failure
        await fallback.compact(KEY)
    assert [m.text for m in await layer.compact(KEY)] == [framed("gist")]  # nothing to cut: no call
    await layer.save_messages(KEY, pairs(2, start=10))
    with pytest.raises(SummarizerError):
        await layer.compact(KEY)


# replace, conditional saves, forwarded abilities ---------------------------------------


async def test_replace_drops_the_view_and_the_checkpoint() -> None:
    store = InMemoryChatStorage()
    fake = FakeSummarizer()
    layer = layer_over(store, fake)
    other = layer_over(store, fake)
    await layer.save_messages(KEY, pairs(3))
    await layer.fetch(KEY)
    await other.fetch(KEY)
    replacement = pairs(1, start=7)
    replaceable = find_ability(layer, ReplaceableStorage)
    assert replaceable is not None
    replacement = await replaceable.replace(KEY, replacement)
    assert [m.text for m in replacement] == ["q7", "a7"]
    assert await layer.fetch(KEY) == replacement
    assert await other.fetch(KEY) == replacement  # the other instance saw the new epoch
    assert await store.load_checkpoint(KEY) is None


class VersionedReplace(InMemoryChatStorage):
    """A store whose ``replace`` takes ``expected_version`` (recorded, then ignored)."""

    def __init__(self) -> None:
        super().__init__()
        self.versions: list[str | None] = []

    async def replace(
        self, key: ChatKey, messages: Any, *, expected_version: str | None = None
    ) -> list[ChatMessage]:
        self.versions.append(expected_version)
        return await super().replace(key, messages)


async def test_replace_passes_expected_version_to_the_stack_below() -> None:
    store = VersionedReplace()
    layer = layer_over(store, FakeSummarizer())
    await layer.save_messages(KEY, pairs(3))
    await layer.fetch(KEY)
    version = (await store.head(KEY)).version
    replaced = await layer.replace(KEY, pairs(1, start=7), expected_version=version)
    await layer.replace(KEY, pairs(1, start=8))
    assert store.versions == [version, None]  # not given: not passed (older stores)
    assert [m.text for m in replaced] == ["q7", "a7"]
    assert [m.text for m in await layer.fetch(KEY)] == ["q8", "a8"]  # the view was dropped


async def test_save_messages_if_detects_a_stale_writer() -> None:
    store = InMemoryChatStorage()
    layer = layer_over(store, FakeSummarizer(), trigger_at=10)
    await layer.save_messages(KEY, pairs(1))
    await layer.fetch(KEY)
    version = (await store.head(KEY)).version
    new = await layer.save_messages_if(KEY, [ChatMessage("user", "ok")], expected_version=version)
    assert (await layer.fetch(KEY))[-1] == new[0]
    with pytest.raises(ConflictError):
        await layer.save_messages_if(KEY, [ChatMessage("user", "stale")], expected_version=version)
    assert [m.text for m in await store.fetch(KEY)][-1] == "ok"


def test_abilities_forwarded_but_not_checkpoints() -> None:
    layer = layer_over(InMemoryChatStorage(), FakeSummarizer())
    for ability in (
        ListableStorage,
        ReplaceableStorage,
        SessionListing,
        SearchableStorage,
        RecordStorage,
        RetentionStorage,
    ):
        assert find_ability(layer, ability) is layer, ability
    # The layer consumes checkpoints. It forwards the raw record's head (an orchestrator
    # reads head().version for save_messages_if through the whole stack) and tail.
    assert find_ability(layer, CheckpointStorage) is None
    assert find_ability(layer, SequencedStorage) is layer
    assert find_ability(layer_over(Recorder(), FakeSummarizer()), ReplaceableStorage) is None


async def test_purge_drops_cached_views() -> None:
    clock = Clock(now=1_000_000.0)
    store = InMemoryChatStorage(retention=100, clock=clock)
    layer = layer_over(store, FakeSummarizer(), trigger_at=10, coherence="process")
    at = datetime.fromtimestamp(clock.now, UTC)
    await layer.save(KEY, ChatMessage("user", "old", created_at=at - timedelta(seconds=50)))
    await layer.save(KEY, ChatMessage("user", "new", created_at=at))
    assert len(await layer.fetch(KEY)) == 2
    clock.now += 60  # "old" is 110 s old now
    assert await layer.purge() == 1
    assert [m.text for m in await layer.fetch(KEY)] == ["new"]


# Bounded state, also while the summarizer keeps failing ----------------------------------


@pytest.mark.parametrize("summaries", ["memory", "store"])
@pytest.mark.parametrize("on_error", ["raise", "fallback"])
async def test_state_never_exceeds_max_buffers_while_summaries_fail(
    summaries: str, on_error: str
) -> None:
    store = InMemoryChatStorage()
    fake = FakeSummarizer()
    fake.fail = RuntimeError("model down")
    layer = layer_over(store, fake, max_buffers=3, summaries=summaries, on_error=on_error)
    for n in range(10):
        key = ChatKey("u", "s", f"agent{n}")
        await layer.save_messages(key, pairs(3))
        try:
            await layer.fetch(key)
        except SummarizerError:
            assert on_error == "raise"
        await layer.save(key, ChatMessage("user", "more"))
        assert len(layer._states) <= 3
    assert layer.summary_failures >= 10


async def test_failing_activations_leave_no_state_beyond_max_buffers() -> None:
    """The default options only: a layer that kept a state per failing key would fail."""
    fake = FakeSummarizer()
    fake.fail = RuntimeError("model down")
    layer = SummarizingChatStorage(
        InMemoryChatStorage(), fake, trigger_at=2, keep_last=1, max_buffers=2
    )
    for n in range(6):
        key = ChatKey("u", "s", f"agent{n}")
        await layer.save_messages(key, pairs(3))
        with pytest.raises(SummarizerError):
            await layer.fetch(key)
    assert len(layer._states) <= 2


async def test_stale_writer_detection_through_the_whole_stack() -> None:
    from storage.errors import ConflictError

    layer = layer_over(InMemoryChatStorage(), FakeSummarizer(), trigger_at=2)
    await layer.save(KEY, ChatMessage("user", "first"))
    version = (await layer.head(KEY)).version
    await layer.save(KEY, ChatMessage("user", "someone else"))  # another worker writes
    with pytest.raises(ConflictError):
        await layer.save_messages_if(KEY, [ChatMessage("user", "stale")], expected_version=version)
    assert [m.text for m in await layer.fetch(KEY)] == ["first", "someone else"]
    fresh = (await layer.head(KEY)).version
    await layer.save_messages_if(KEY, [ChatMessage("user", "ok")], expected_version=fresh)
    assert (await layer.fetch(KEY))[-1].text == "ok"


async def test_open_storage_enters_a_background_layer(tmp_path: Path) -> None:
    from storage.config import open_storage

    url = f"summarize?background=true&trigger_at=2::sqlite:///{tmp_path}/bg.db"
    async with open_storage(url) as stack:
        for n in range(8):  # would raise "not entered" if the stack did not enter the layer
            await stack.save(KEY, ChatMessage("user" if n % 2 == 0 else "assistant", f"m{n}"))
        assert len(await stack.fetch(KEY)) >= 1
    async with open_storage(url) as again:  # a new worker: the raw record is all there
        raw = await again.fetch_all_chats(KEY.user_id, KEY.session_id)
        assert [m.message.text for m in raw] == [f"m{n}" for n in range(8)]

"""Summaries that hold across workers and restarts, on real stores:
two stack instances over one database, and four processes saving and fetching one long
conversation -> exactly one summarizer call per threshold crossing and one final view."""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from storage import open_storage
from storage.abilities import CheckpointStorage, find_ability
from storage.history import last_turns_start
from storage.layers.summarizing import SummarizingChatStorage
from storage.layers.summarizing.cutting import view_form
from storage.message import ChatKey, ChatMessage
from tests.layers.summarizing.test_layer import FakeSummarizer, pairs, summary

KEY = ChatKey("u", "s", "a")
STORES = ["sqlite", "jsonl", "redis", "postgres"]


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of a fresh, empty store of each kind (servers started on first use)."""
    kind = request.param
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'chats.db'}"
    elif kind == "jsonl":
        yield f"jsonl://{tmp_path / 'chats'}"
    elif kind == "redis":
        url = request.getfixturevalue("redis_url")
        yield f"{url}?prefix=fleet{uuid.uuid4().hex[:8]}"
    else:
        dsn = request.getfixturevalue("postgres_dsn")
        sep = "&" if "?" in dsn else "?"
        yield f"{dsn}{sep}schema=fleet{uuid.uuid4().hex[:8]}"


def base_store(url: str) -> Any:
    """The base store of ``url`` (not wrapped in a ``Stack``)."""
    return open_storage(url).inner


def record_call(path: str, call: dict[str, Any]) -> None:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(json.dumps(call) + "\n")


def write_view(path: str, view: list[ChatMessage]) -> None:
    with open(path, "w") as f:
        json.dump([[m.role, m.text, m.id] for m in view], f)


class CountingSummarizer:
    """The fake summary, and one line per call appended to ``path`` (shared by processes)."""

    def __init__(self, path: str) -> None:
        self.path = path

    async def __call__(self, history: list[ChatMessage], keep_last: int) -> list[ChatMessage]:
        start = last_turns_start(history, keep_last)
        first = history[1] if history and history[0].is_summary else history[0]
        record_call(self.path, {"pid": os.getpid(), "first": first.id, "n": start})
        return [summary(f"summary of {start} messages"), *history[start:]]

    def describe(self) -> str:
        return "counting"


def calls(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


# Two instances over one database ---------------------------------------------------------


@pytest.mark.anyio
async def test_two_instances_over_one_database(store_url: str, anyio_backend: str) -> None:
    if anyio_backend == "trio" and not store_url.startswith(("sqlite", "jsonl")):
        pytest.skip("network drivers run on asyncio")
    fake = FakeSummarizer()
    store_a, store_b = base_store(store_url), base_store(store_url)
    try:
        a = SummarizingChatStorage(store_a, fake, trigger_at=3, keep_last=1)
        b = SummarizingChatStorage(store_b, fake, trigger_at=3, keep_last=1)
        assert a.summaries == b.summaries == "store"
        await a.save_messages(KEY, pairs(2))
        await a.fetch(KEY)
        await b.save(KEY, ChatMessage("user", "from b"))
        assert (await a.fetch(KEY))[-1].text == "from b"  # 12.3: coherent
        await b.fetch(KEY)
        await b.save_messages(KEY, pairs(2, start=5))  # b crosses the trigger: one call
        view = await b.fetch(KEY)
        assert view[0].is_summary
        assert await a.fetch(KEY) == view  # a serves b's checkpoint
        assert len(fake.calls) == 1
        restarted = SummarizingChatStorage(base_store(store_url), fake, trigger_at=3, keep_last=1)
        assert await restarted.fetch(KEY) == view  # 12.2: a restart makes no call
        assert len(fake.calls) == 1
        await restarted.aclose()
        await b.delete(KEY)
        assert await a.fetch(KEY) == []
        ck = find_ability(store_a, CheckpointStorage)
        assert ck is not None
        assert await ck.load_checkpoint(KEY) is None
    finally:
        await store_a.aclose()
        await store_b.aclose()


# Four processes, one conversation --------------------------------------------------------

TURNS = 8


def _worker(url: str, counter: str, worker: int, barrier: Any, out: str) -> None:
    async def work() -> None:
        layer = SummarizingChatStorage(
            base_store(url), CountingSummarizer(counter), trigger_at=3, keep_last=1
        )
        for n in range(TURNS):
            await layer.save_messages(
                KEY,
                [
                    ChatMessage("user", f"w{worker} q{n}"),
                    ChatMessage("assistant", f"w{worker} a{n}"),
                ],
            )
            await layer.fetch(KEY)
        await layer.aclose()

    async def final(write: bool) -> None:
        layer = SummarizingChatStorage(
            base_store(url), CountingSummarizer(counter), trigger_at=3, keep_last=1
        )
        view = await layer.fetch(KEY)
        if write:
            write_view(out, view)
        await layer.aclose()

    anyio.run(work)
    barrier.wait()  # every process has saved everything
    # A fetch may still cross the trigger (a process that skipped while another held the
    # lease left the newest messages unsummarized): one settling fetch each, then the view.
    anyio.run(final, False)
    barrier.wait()
    anyio.run(final, True)


def run_processes(target: Callable[..., None], args: list[tuple[Any, ...]]) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(args))
    procs = [ctx.Process(target=target, args=(*a[:3], barrier, *a[3:])) for a in args]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0, f"worker exited with {p.exitcode}"


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.slow
def test_four_processes_one_call_per_crossing_and_one_view(
    store_url: str, tmp_path: Path, anyio_backend: str
) -> None:
    counter = tmp_path / "calls.jsonl"
    outs = [tmp_path / f"view{w}.json" for w in range(4)]
    run_processes(_worker, [(store_url, str(counter), w, str(outs[w])) for w in range(4)])
    made = calls(counter)
    views = [json.loads(o.read_text()) for o in outs]

    async def check() -> None:
        store = base_store(store_url)
        ck = find_ability(store, CheckpointStorage)
        assert ck is not None
        checkpoint = await ck.load_checkpoint(KEY)
        tail = await ck.fetch_since(KEY, 0)
        await store.aclose()
        assert checkpoint is not None
        # Exactly one call per crossing: every call made one checkpoint, no two calls
        # summarized the same messages, and no process summarized again after a restart.
        assert len(made) == checkpoint.version
        # 64 messages through a trigger of 6: several crossings. How many calls they take
        # depends on scheduling (a lease holder starved of CPU covers more messages in
        # one call while the others skip), so only that rounds followed each other.
        assert len(made) >= 2
        assert len({c["first"] for c in made}) == len(made)
        raw = list(tail.messages)
        assert len(raw) == 4 * TURNS * 2
        for w in range(4):  # each worker's messages in its own order
            own = [m.text for m in raw if m.text.startswith(f"w{w} ")]
            assert own == [t for n in range(TURNS) for t in (f"w{w} q{n}", f"w{w} a{n}")]
        after = [m for m, s in zip(raw, tail.seqs, strict=True) if s > checkpoint.covers_to]
        # The view: the checkpoint as the view shows it (one leading message), then the rest.
        expected = [[m.role, m.text, m.id] for m in (*view_form(checkpoint.messages), *after)]
        assert all(v == expected for v in views)  # every process ends with the same view

    anyio.run(check)


class Clock:
    """The stores' clock for the lease test, moved by hand (seconds since the Unix epoch)."""

    def __init__(self) -> None:
        self.now = 2_000_000_000.0

    def __call__(self) -> float:
        return self.now


CLOCK = Clock()


@pytest.mark.anyio
async def test_a_dead_lease_holder_loses_the_lease_after_its_ttl(
    store_url: str, anyio_backend: str
) -> None:
    if anyio_backend == "trio" and not store_url.startswith(("sqlite", "jsonl")):
        pytest.skip("network drivers run on asyncio")
    probe = base_store(store_url)
    await probe.aclose()
    store = type(probe).from_url(store_url, clock=CLOCK)  # the from_url contract
    try:
        fake = FakeSummarizer()
        layer = SummarizingChatStorage(store, fake, trigger_at=2, keep_last=1, lease_ttl=30)
        await layer.save_messages(KEY, pairs(3))
        ck = find_ability(store, CheckpointStorage)
        assert ck is not None
        assert await ck.acquire_lease(KEY, "a worker that died", 30)
        view = await layer.fetch(KEY)  # another owner holds the lease: serve the raw view
        assert fake.calls == []
        assert len(view) == 6
        await layer.save(KEY, ChatMessage("user", "q3"))
        assert fake.calls == []
        CLOCK.now += 31
        await layer.save(KEY, ChatMessage("assistant", "a3"))  # the lease expired: one call
        assert len(fake.calls) == 1
        assert (await layer.fetch(KEY))[0].is_summary
        assert await ck.acquire_lease(KEY, "the next worker", 30)  # given back after use
    finally:
        await store.aclose()

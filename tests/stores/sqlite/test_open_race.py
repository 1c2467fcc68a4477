"""Workers starting at once on a new database file all open it (the first switches it to
WAL; a journal-mode change is not retried by SQLite's busy handler, the store retries it)."""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.queues import Queue
from pathlib import Path

import anyio

from storage import ChatKey, ChatMessage, SQLiteChatStorage

WORKERS = 4
TRIALS = 12


def _worker(path: str, start: float, worker: int, results: Queue[str]) -> None:
    async def run() -> None:
        async with SQLiteChatStorage(path) as store:
            await store.save(ChatKey("u", f"s{worker}", "a"), ChatMessage("user", "hello"))

    while time.time() < start:  # all workers open the file at the same moment
        pass
    try:
        anyio.run(run)
        results.put("ok")
    except Exception as exc:
        results.put(repr(exc))


def test_workers_opening_a_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    for trial in range(TRIALS):
        path = str(tmp_path / f"new{trial}.db")
        results: Queue[str] = context.Queue()
        start = time.time() + 0.2
        workers = [
            context.Process(target=_worker, args=(path, start, n, results)) for n in range(WORKERS)
        ]
        for process in workers:
            process.start()
        for process in workers:
            process.join(30)
        failures = [r for r in (results.get(timeout=5) for _ in workers) if r != "ok"]
        assert failures == [], f"trial {trial}"

        async def count(db: str = path) -> int:
            async with SQLiteChatStorage(db) as store:
                return sum(
                    [len(await store.fetch(ChatKey("u", f"s{n}", "a"))) for n in range(WORKERS)]
                )

        assert anyio.run(count) == WORKERS

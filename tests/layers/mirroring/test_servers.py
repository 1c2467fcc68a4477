"""The ``mirror`` layer with a real secondary server stopped in the middle of a run.

PostgreSQL stopped while a summarizing stack keeps serving: every call succeeds, what the
secondary missed (messages and summary checkpoints) is marked and repaired by the next
writes once it is back, and the secondary then serves the same views with no summarizer
call. Redis killed (kill -9) while a worker writes: the worker exits with marks left in the
primary, and ``chatlayers migrate`` (the console script) repairs and clears them.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import anyio
import pytest

from storage import open_storage
from storage.layers.mirroring import MirrorChatStorage
from storage.message import ChatKey, ChatMessage
from storage.migrate import record_side, verify
from storage.migrate.journal import JOURNAL_USER
from tests.cli.test_migrate import run, run_json
from tests.servers import PostgresServer, RedisServer

pytest_plugins = ["tests.servers"]

KEYS = [ChatKey("user", f"session-{n}", "agent") for n in range(4)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _turn(key: ChatKey, turn: int) -> tuple[ChatMessage, ChatMessage]:
    tag = f"{key.session_id}-{turn}"
    return (
        ChatMessage("user", f"question {tag}: what about order {turn}?", id=f"u-{tag}"),
        ChatMessage("assistant", f"answer {tag}: it ships on day {turn}.", id=f"a-{tag}"),
    )


@pytest.mark.anyio
async def test_postgres_secondary_stopped_mid_run_and_back(
    postgres_server_factory: type[PostgresServer], tmp_path: Path
) -> None:
    server = postgres_server_factory()
    await anyio.to_thread.run_sync(server.start)
    secondary = quote(server.dsn, safe="")
    url = f"summarize?trigger_at=3::mirror?secondary={secondary}&retry_after=0::sqlite:///{tmp_path}/p.db"
    async with open_storage(url) as stack:
        layer = stack.find(MirrorChatStorage)
        assert layer is not None
        for turn in range(12):
            if turn == 4:
                await anyio.to_thread.run_sync(server.stop)
            if turn == 8:
                assert layer.missed == len(KEYS)  # each conversation marked once
                assert layer.secondary_failures >= 4 * len(KEYS)
                await anyio.to_thread.run_sync(server.start)
            for key in KEYS:
                question, answer = _turn(key, turn)
                await stack.save(key, question)
                await stack.fetch(key)  # summarizes past 6 messages: checkpoints mirrored
                await stack.save(key, answer)
        assert (layer.missed, layer.repairs) == (0, len(KEYS))
        views = {key: await stack.fetch(key) for key in KEYS}
        async with open_storage(server.dsn) as pg:
            assert (await verify(layer.inner, pg)).equal
            checkpoints = record_side(pg).checkpoints
            assert checkpoints is not None
            for key in KEYS:  # mirrored, and repaired where the outage lost one
                assert await checkpoints.load_checkpoint(key) is not None
        # the cut-over: the secondary serves the same views, no summarizer call
        async with open_storage(f"summarize?trigger_at=3::{server.dsn}") as moved:
            for key in KEYS:
                assert await moved.fetch(key) == views[key]
            summarizing = next(moved.find_all(lambda c: hasattr(c, "summarizer_calls")))
            assert summarizing.summarizer_calls == 0  # type: ignore[attr-defined]


@pytest.mark.anyio
async def test_redis_secondary_killed_then_migrate_repairs_what_the_worker_left(
    redis_server_factory: type[RedisServer], tmp_path: Path
) -> None:
    server = redis_server_factory(tmp_path / "redis")
    await anyio.to_thread.run_sync(server.start)
    primary = f"sqlite:///{tmp_path}/p.db"
    async with open_storage(f"mirror?secondary={server.url}::{primary}") as stack:
        layer = stack.find(MirrorChatStorage)
        assert layer is not None
        for key in KEYS:
            await stack.save_messages(key, _turn(key, 0))
        await anyio.to_thread.run_sync(server.kill)
        for key in KEYS[:2]:
            await stack.save_messages(key, _turn(key, 1))  # no error
        assert layer.missed == 2
    await anyio.to_thread.run_sync(server.start)  # the worker is gone; its marks are not
    async with open_storage(primary) as store:
        assert len(await store.list_keys(JOURNAL_USER)) == 2
    done = run("verify", "--from", primary, "--to", server.url, check=1)
    assert "different" in done.stdout
    report = run_json("migrate", "--from", primary, "--to", server.url)
    assert (report["marks_repaired"], report["messages_copied"]) == (2, 4)
    run("verify", "--from", primary, "--to", server.url)
    async with open_storage(primary) as store:
        assert await store.list_keys(JOURNAL_USER) == []

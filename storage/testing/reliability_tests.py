"""Reliability scenarios of the conformance kit, for every store that can have
them: kill -9 in the middle of a write, two processes writing one key, a server killed and
restarted. Each runs on one anyio backend only (they test processes, not the event loop)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import anyio
import pytest

from storage.errors import StorageUnavailableError
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage
from storage.testing.harness import ServerControl, StoreHarness, open_store

__all__ = ["ReliabilityTests", "kill_mid_run", "one_backend"]

F = TypeVar("F", bound=Callable[..., Any])
KEY = ChatKey("crash*user", "session:1", "agent/1")


def one_backend(fn: F) -> F:
    """Run the test on the first of the suite's backends only."""
    fn._chatlayers_one_backend = True  # type: ignore[attr-defined]
    return fn


def _command(url: str, prefix: str, batches: int, batch_size: int) -> list[str]:
    spec = {
        "url": url,
        "key": [KEY.user_id, KEY.session_id, KEY.agent_id],
        "prefix": prefix,
        "batches": batches,
        "batch_size": batch_size,
    }
    return [sys.executable, "-m", "storage.testing.child", json.dumps(spec)]


def _child_env() -> dict[str, str]:
    # The child finds what this process finds (a store registered by a test's entry point).
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


async def _kill_after(command: list[str], acks: int) -> int:
    """Run a writer, SIGKILL it once it acknowledged ``acks`` batches; return how many
    batches it acknowledged in all."""
    output = b""
    async with await anyio.open_process(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_child_env()
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        async for chunk in process.stdout:
            output += chunk
            if output.count(b"\n") >= acks:
                break
        process.kill()
        await process.wait()
        async for chunk in process.stdout:  # acknowledgements already in the pipe count too
            output += chunk
        errors = b"".join([chunk async for chunk in process.stderr])
    lines = [line for line in output.split(b"\n")[:-1] if line.startswith(b"ack ")]
    if len(lines) < acks:
        pytest.fail(f"the writer stopped early: {errors.decode(errors='replace')[-2000:]}")
    assert [int(line.split()[1]) for line in lines] == list(range(len(lines)))
    return len(lines)


def _check_rounds(ids: list[str], rounds: list[int], size: int) -> None:
    """``ids`` holds, per round, every acknowledged batch whole and in order, then at most
    the one batch that was being written (whole or absent), and nothing else."""
    assert len(ids) == len(set(ids)), "a message is stored twice"
    position = 0
    for round_no, acked in enumerate(rounds):
        expected = [f"r{round_no}-{n}-{i}" for n in range(acked) for i in range(size)]
        got = ids[position : position + len(expected)]
        assert got == expected, f"round {round_no}: an acknowledged message is lost or moved"
        position += len(expected)
        in_flight = [f"r{round_no}-{acked}-{i}" for i in range(size)]
        if ids[position : position + 1] == in_flight[:1]:
            assert ids[position : position + size] == in_flight, "a batch was stored in part"
            position += size
    assert ids[position:] == [], f"unexpected messages: {ids[position:][:5]}"


class ReliabilityTests:
    """Crash, concurrency and restart scenarios (skipped where the harness cannot have them)."""

    @one_backend
    async def test_kill_9_mid_write_loses_nothing_acknowledged(
        self, harness: StoreHarness, opened_stores: list[ChatStorage]
    ) -> None:
        if harness.url is None or not harness.persistent:
            pytest.skip("no URL another process can open")
        size = 3
        rounds: list[int] = []
        for round_no in range(2):  # the second round appends after the first crash
            rounds.append(await _kill_after(_command(harness.url, f"r{round_no}", 10**6, size), 8))
            store = await open_store(harness.open)
            opened_stores.append(store)
            _check_rounds([m.id for m in await store.fetch(KEY)], rounds, size)
        after = await store.save(KEY, ChatMessage("user", "after the crashes"))
        assert len(after) == 1
        history = await store.fetch(KEY)
        assert history[-1].id == after[0].id
        assert len(await store.fetch(KEY, limit=4)) == 4

    @one_backend
    async def test_two_processes_on_one_key(
        self, harness: StoreHarness, opened_stores: list[ChatStorage]
    ) -> None:
        if harness.url is None or not harness.persistent:
            pytest.skip("no URL another process can open")
        url = harness.url
        batches, size = 12, 4

        async def writer(prefix: str) -> None:
            result = await anyio.run_process(
                _command(url, prefix, batches, size), check=False, env=_child_env()
            )
            assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]

        async with anyio.create_task_group() as tg:
            for prefix in ("p0", "p1"):
                tg.start_soon(writer, prefix)
        store = await open_store(harness.open)
        opened_stores.append(store)
        ids = [m.id for m in await store.fetch(KEY)]
        assert len(ids) == len(set(ids)) == 2 * batches * size
        for prefix in ("p0", "p1"):
            mine = [i for i in ids if i.startswith(prefix + "-")]
            assert mine == [f"{prefix}-{n}-{i}" for n in range(batches) for i in range(size)]
            for n in range(batches):  # each batch is contiguous in the key's order
                start = ids.index(f"{prefix}-{n}-0")
                assert ids[start : start + size] == [f"{prefix}-{n}-{i}" for i in range(size)]
        merged = await store.fetch_all_chats(KEY.user_id, KEY.session_id)
        assert len(merged) == len(ids)

    @one_backend
    async def test_server_restart_loses_nothing(self, server: ServerControl | None) -> None:
        if server is None:
            pytest.skip("no server to restart")
        store = await open_store(server.open)
        try:
            await kill_mid_run(store, server)
        finally:
            await store.aclose()


async def kill_mid_run(store: ChatStorage, server: ServerControl, key: ChatKey = KEY) -> None:
    """Kill the server while a writer saves; the failing save raises
    StorageUnavailableError (password redacted); after a restart nothing acknowledged is
    lost or duplicated and retried saves are no-ops."""
    base_time = datetime(2024, 5, 1, tzinfo=UTC)
    acknowledged: list[ChatMessage] = []
    failure: list[tuple[ChatMessage, StorageUnavailableError]] = []
    enough = anyio.Event()

    async def writer() -> None:
        for n in range(100_000):
            message = ChatMessage(
                "user", f"message {n}", id=f"m{n}", created_at=base_time + timedelta(seconds=n)
            )
            try:
                stored = await store.save(key, message)
            except StorageUnavailableError as exc:
                failure.append((message, exc))
                return
            assert stored == [message]
            acknowledged.append(message)
            if n == 25:
                enough.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(writer)
        await enough.wait()
        await anyio.to_thread.run_sync(server.kill)
    assert failure, "no save failed although the server was killed"
    failed, error = failure[0]
    assert error.__cause__ is not None
    if server.password is not None:
        assert server.password not in str(error)
        assert ":***@" in str(error)
    with pytest.raises(StorageUnavailableError) as down:
        await store.fetch(key)
    if server.password is not None:
        assert server.password not in str(down.value)
    await anyio.to_thread.run_sync(server.restart)
    history = await store.fetch(key)
    ids = [m.id for m in history]
    assert len(ids) == len(set(ids)), "duplicate after restart"
    assert ids[: len(acknowledged)] == [m.id for m in acknowledged], "acknowledged save lost"
    assert history[: len(acknowledged)] == acknowledged
    # The failed save may or may not have landed; retrying it stores it exactly once.
    assert len(history) in (len(acknowledged), len(acknowledged) + 1)
    retried = await store.save(key, failed)
    assert retried == ([] if len(history) > len(acknowledged) else [failed])
    assert await store.save(key, acknowledged[-1]) == []
    assert await store.save_messages(key, acknowledged[:5]) == []
    after = await store.fetch(key)
    assert [m.id for m in after] == [m.id for m in acknowledged] + [failed.id]

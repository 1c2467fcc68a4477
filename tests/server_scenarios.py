"""Scenarios every server store must survive (Redis, Redis Cluster, PostgreSQL).

Shared by tests/stores/redis/test_store.py and tests/stores/postgres/test_store.py:
concurrent writers (tasks in one process through two store instances, and two processes),
a server killed in the middle of a run and restarted, and a differential check against
the in-memory store.

Run as a module it is the writer process of the two-process scenario::

    python -m tests.server_scenarios redis|postgres URL OPTION FIRST_TASK TASKS PER_TASK KEYS
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage

__all__ = [
    "check_concurrent_result",
    "kill_mid_run",
    "make_store",
    "operations",
    "run_writers",
    "same_as_memory",
    "writer_processes",
]

BASE_TIME = datetime(2024, 5, 1, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[1]  # so ``-m tests.server_scenarios`` imports


def make_store(kind: str, url: str, option: str) -> ChatStorage:
    """A store by name: ``option`` is the Redis prefix or the PostgreSQL schema."""
    if kind == "redis":
        from storage.stores.redis import RedisChatStorage

        return RedisChatStorage(url, prefix=option)
    if kind == "redis-cluster":
        from storage.stores.redis import RedisChatStorage

        return RedisChatStorage(url, prefix=option, cluster=True)
    if kind == "postgres":
        from storage.stores.postgres import PostgresChatStorage

        return PostgresChatStorage(url, schema=option)
    raise ValueError(kind)


def concurrency_keys(count: int) -> list[ChatKey]:
    return [ChatKey("writer*user", f"session:{n}", "agent{x}") for n in range(count)]


def writer_message(task: int, n: int) -> ChatMessage:
    return ChatMessage("user", f"{task}:{n}", id=f"t{task}-n{n}")


async def run_writers(
    stores: Sequence[ChatStorage], tasks: range, per_task: int, keys: int
) -> None:
    """``len(tasks)`` tasks, each appending ``per_task`` messages one by one to key
    ``task % keys`` through store ``task % len(stores)``."""
    all_keys = concurrency_keys(keys)

    async def writer(task: int) -> None:
        store = stores[task % len(stores)]
        key = all_keys[task % keys]
        for n in range(per_task):
            stored = await store.save(key, writer_message(task, n))
            assert len(stored) == 1

    async with anyio.create_task_group() as tg:
        for task in tasks:
            tg.start_soon(writer, task)


async def check_concurrent_result(
    store: ChatStorage, tasks: range, per_task: int, keys: int
) -> None:
    """Every message is present exactly once, under its key, in each writer's order."""
    all_keys = concurrency_keys(keys)
    total = 0
    for index, key in enumerate(all_keys):
        messages = await store.fetch(key)
        ids = [m.id for m in messages]
        assert len(ids) == len(set(ids)), f"duplicates under {key}"
        expected = {f"t{t}-n{n}" for t in tasks if t % keys == index for n in range(per_task)}
        assert set(ids) == expected, f"messages lost or misplaced under {key}"
        last: dict[str, int] = {}
        for m in messages:
            task, n = m.text.split(":")
            assert last.get(task, -1) == int(n) - 1, f"writer {task} out of order under {key}"
            last[task] = int(n)
        total += len(messages)
    assert total == len(tasks) * per_task


async def writer_processes(
    kind: str, url: str, option: str, processes: int, tasks: int, per_task: int, keys: int
) -> None:
    """Run ``processes`` writer processes at once, each with ``tasks`` tasks of its own."""

    async def one(p: int) -> None:
        result = await anyio.run_process(
            [
                sys.executable,
                "-m",
                "tests.server_scenarios",
                kind,
                url,
                option,
                str(p * tasks),
                str(tasks),
                str(per_task),
                str(keys),
            ],
            check=False,
            cwd=ROOT,
        )
        assert result.returncode == 0, result.stderr.decode(errors="replace")

    async with anyio.create_task_group() as tg:
        for p in range(processes):
            tg.start_soon(one, p)


async def kill_mid_run(
    store: ChatStorage,
    kill: Callable[[], None],
    restart: Callable[[], None],
    password: str,
    key: ChatKey,
) -> None:
    """The kit's kill-mid-run scenario (:func:`storage.testing.reliability_tests.kill_mid_run`)
    on a store the caller opened."""
    from storage.testing.harness import ServerControl
    from storage.testing.reliability_tests import kill_mid_run as scenario

    server = ServerControl(open=lambda: store, kill=kill, restart=restart, password=password)
    await scenario(store, server, key)


# --------------------------------------------------------------------------- differential

USERS = ("u", "u:*", "u%3A%2A")  # the last is the first's escaped form: must stay apart
SESSIONS = ("s", "s{1}")
AGENTS = ("a", "a?[b]")
TIMES = tuple(BASE_TIME + timedelta(seconds=n) for n in range(3))  # few values: many ties


def operations() -> Any:
    """A hypothesis strategy of store operations (saves with repeated ids, reads, deletes)."""
    from hypothesis import strategies as st

    keys = st.builds(
        ChatKey, st.sampled_from(USERS), st.sampled_from(SESSIONS), st.sampled_from(AGENTS)
    )
    message = st.one_of(
        st.builds(
            lambda role, text, mid, at: ChatMessage(role, text, id=mid, created_at=at),
            st.sampled_from(("user", "assistant", "system")),
            st.text(max_size=8),
            st.sampled_from([f"id{n}" for n in range(12)]),
            st.sampled_from(TIMES),
        ),
        st.builds(
            lambda mid, at: ChatMessage("tool", "result", tool_call_id="c1", id=mid, created_at=at),
            st.sampled_from([f"id{n}" for n in range(12)]),
            st.sampled_from(TIMES),
        ),
    )
    return st.lists(
        st.one_of(
            st.tuples(st.just("save"), keys, st.lists(message, max_size=4)),
            st.tuples(st.just("fetch"), keys, st.sampled_from([None, 0, 1, 2, 3, 5])),
            st.tuples(st.just("all"), st.sampled_from(USERS), st.sampled_from(SESSIONS)),
            st.tuples(st.just("delete"), keys),
            st.tuples(st.just("delete_user"), st.sampled_from(USERS)),
        ),
        max_size=25,
    )


async def same_as_memory(store: ChatStorage, ops: list[tuple[Any, ...]], run: str) -> None:
    """Apply ``ops`` to ``store`` and to a fresh in-memory store: every result must match.

    User ids get the suffix ``run`` so one store can serve many examples."""
    from storage.stores.memory import InMemoryChatStorage

    reference = InMemoryChatStorage()

    def scoped(key: ChatKey) -> ChatKey:
        return ChatKey(key.user_id + run, key.session_id, key.agent_id)

    for op in ops:
        name = op[0]
        if name == "save":
            key = scoped(op[1])
            expected: Any = await reference.save_messages(key, op[2])
            got: Any = await store.save_messages(key, op[2])
        elif name == "fetch":
            key = scoped(op[1])
            expected = await reference.fetch(key, limit=op[2])
            got = await store.fetch(key, limit=op[2])
        elif name == "all":
            expected = await reference.fetch_all_chats(op[1] + run, op[2])
            got = await store.fetch_all_chats(op[1] + run, op[2])
        elif name == "delete":
            await reference.delete(scoped(op[1]))
            await store.delete(scoped(op[1]))
            expected = got = None
        else:
            await reference.delete_user(op[1] + run)
            await store.delete_user(op[1] + run)
            expected = got = None
        assert got == expected, f"{op!r}: {got!r} != {expected!r}"
    for user in USERS:
        for session in SESSIONS:
            assert await store.fetch_all_chats(user + run, session) == (
                await reference.fetch_all_chats(user + run, session)
            )


async def _child(argv: list[str]) -> None:
    kind, url, option, first, tasks, per_task, keys = argv
    store = make_store(kind, url, option)
    try:
        tasks_range = range(int(first), int(first) + int(tasks))
        await run_writers([store], tasks_range, int(per_task), int(keys))
    finally:
        await store.aclose()


def _main(argv: list[str]) -> Any:
    anyio.run(_child, argv, backend="asyncio")


if __name__ == "__main__":
    _main(sys.argv[1:])

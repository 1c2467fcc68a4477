"""Session paging under concurrent writers, for every store that lists sessions: a walk of
``list_sessions`` cursors while a task of this process, or another process, keeps saving to
the same sessions lists every session that existed for the whole walk exactly once.

Saves are stamped by the store (no caller ``created_at``), as in production, so each one makes
its session the newest: a cursor ordered by last activity alone skips it. The walker waits for
a whole round of saves after every page, so a store that drops moved sessions fails every run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import pytest

from storage.abilities import SessionListing
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage
from storage.testing.ability_tests import need
from storage.testing.harness import StoreHarness, open_store
from storage.testing.reliability_tests import _child_env, one_backend

__all__ = ["PagingTests", "walk_sessions"]

_SESSIONS = 24
_PAGE = 5


async def walk_sessions(
    lister: SessionListing, user: str, limit: int, between: Callable[[], Awaitable[None]]
) -> list[str]:
    """The session ids of a whole cursor walk, ``between()`` awaited after every page."""
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(100):
        page = await lister.list_sessions(user, limit=limit, cursor=cursor)
        seen += [s.session_id for s in page.sessions]
        cursor = page.next_cursor
        if cursor is None:
            return seen
        await between()
    pytest.fail(f"the walk did not end: {seen}")


async def _seed(store: ChatStorage, user: str) -> list[str]:
    names = [f"s{n:02d}" for n in range(_SESSIONS)]
    for name in names:
        await store.save(ChatKey(user, name, "agent"), ChatMessage("user", f"hello {name}"))
    return names


def _assert_once(seen: list[str], names: list[str]) -> None:
    twice = sorted({s for s in seen if seen.count(s) > 1})
    assert not twice, f"listed twice: {twice}"
    missing = sorted(set(names) - set(seen))
    assert not missing, f"{len(missing)} of {len(names)} sessions never listed: {missing}"


class PagingTests:
    """A ``list_sessions`` walk while other writers keep saving (:mod:`storage.abilities`)."""

    async def test_walk_lists_each_session_once_while_a_task_saves(
        self, store: ChatStorage
    ) -> None:
        lister = need(store, SessionListing)
        user = "walker"
        names = await _seed(store, user)
        rounds = [anyio.Event()]

        async def writer() -> None:
            n = 0
            while True:
                for name in names:
                    await store.save(ChatKey(user, name, "agent"), ChatMessage("user", f"t{n}"))
                    await anyio.lowlevel.checkpoint()  # the memory store never yields by itself
                rounds[-1].set()
                rounds.append(anyio.Event())
                n += 1

        async def a_whole_round() -> None:
            # The round under way may have begun before the page: wait for the next one too.
            later = len(rounds)
            await rounds[later - 1].wait()
            await rounds[later].wait()  # appended with the set above, no await between

        async with anyio.create_task_group() as tg:
            tg.start_soon(writer)
            seen = await walk_sessions(lister, user, _PAGE, a_whole_round)
            tg.cancel_scope.cancel()
        _assert_once(seen, names)

    @one_backend
    async def test_walk_lists_each_session_once_while_a_process_saves(
        self, harness: StoreHarness, opened_stores: list[ChatStorage]
    ) -> None:
        if harness.url is None or not harness.persistent:
            pytest.skip("no URL another process can open")
        store = await open_store(harness.open)
        opened_stores.append(store)
        lister = need(store, SessionListing)
        user = "walker-procs"
        names = await _seed(store, user)
        touch = {"user": user, "sessions": names, "agent": "agent", "rounds": 10_000}
        command = [
            sys.executable,
            "-m",
            "storage.testing.child",
            json.dumps({"url": harness.url, "touch": touch}),
        ]
        async with await anyio.open_process(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_child_env()
        ) as process:
            assert process.stdout is not None
            buffered = b""

            async def a_whole_round() -> None:
                # Two "round" lines after the page: one whole round began after it.
                nonlocal buffered
                assert process.stdout is not None
                needed = buffered.count(b"\n") + 2
                with anyio.fail_after(60):
                    while buffered.count(b"\n") < needed:
                        chunk = await process.stdout.receive()
                        buffered += chunk

            try:
                await a_whole_round()  # the writer is running before the walk starts
                seen = await walk_sessions(lister, user, _PAGE, a_whole_round)
            finally:
                process.kill()
                await process.wait()
        assert process.returncode != 0 or b"round" in buffered
        _assert_once(seen, names)

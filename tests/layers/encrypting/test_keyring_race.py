"""Keyring creation racing itself (SQLite, JSONL and Redis keyrings): tasks of one process and
two processes meeting a keyring that does not exist yet with ``create_keyring``. One keyring
is made and announced once, whoever loses the race sees ``made=False``, the generation is
raised only by the data keys made (one per user, however many first saves race), and every
message reads."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from storage.abilities import ConversationRecord
from storage.layers.encrypting import EncryptingChatStorage, new_master_key
from storage.layers.encrypting.ledger import Ledger
from storage.message import ChatKey, ChatMessage
from storage.stores.jsonl import JsonlChatStorage
from storage.stores.sqlite import SQLiteChatStorage

pytestmark = pytest.mark.anyio

MASTER = new_master_key()
USERS = 40
RINGS = ["sqlite", "jsonl", pytest.param("redis", marks=pytest.mark.redis)]
CREATED = "created the keyring"


class AwaitingSQLite(SQLiteChatStorage):
    """A SQLite store whose listings and records await, like a store across a network: the
    keyring's creation then spans turns of the event loop (the SQLite store never yields)."""

    async def list_keys(self, *args: Any, **kwargs: Any) -> Any:
        await anyio.lowlevel.checkpoint()
        return await super().list_keys(*args, **kwargs)

    async def fetch_records(self, key: ChatKey, *, kind: str | None = None) -> Any:
        await anyio.lowlevel.checkpoint()
        return await super().fetch_records(key, kind=kind)

    async def save_record(self, key: ChatKey, record: ConversationRecord) -> Any:
        await anyio.lowlevel.checkpoint()
        return await super().save_record(key, record)


def ring_url(request: pytest.FixtureRequest, kind: str, tmp_path: Path, backend: str) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'keys' / 'k.db'}"
    if kind == "jsonl":
        return f"jsonl://{tmp_path / 'keys'}"
    if backend != "asyncio":
        pytest.skip("the Redis client runs on asyncio")
    redis_url = str(request.getfixturevalue("redis_url"))
    return f"{redis_url}?prefix=ring{uuid.uuid4().hex[:8]}"


def data_store(kind: str, tmp_path: Path) -> Any:
    return (
        JsonlChatStorage(tmp_path / "data")
        if kind == "jsonl"
        else AwaitingSQLite(tmp_path / "c.db")
    )


def creations(caplog: pytest.LogCaptureFixture) -> int:
    return sum(CREATED in record.getMessage() for record in caplog.records)


async def settled(layer: EncryptingChatStorage, data: Any, users: Sequence[str]) -> int:
    """Check what a race left: one keyring id recorded, the generation raised once per data
    key (and recorded), every user's message readable; the number of data keys."""
    state = await layer.keyring.state()
    entries = await layer.keyring.entries()
    assert sorted(e.user_id for e in entries) == sorted(users)
    assert state.generation == 1 + len(entries)  # 1 when made, +1 per data key
    ledger = Ledger(data, layer.keyring.location)
    assert await ledger.keyring_ids() == {state.keyring_id}
    assert await ledger.newest(0) == (state.generation, state.keyring_id)
    for user in users:
        assert [m.text for m in await layer.fetch(ChatKey(user, "s", "a"))] == [f"hi {user}"]
    return len(entries)


@pytest.mark.parametrize("data", ["sqlite", "jsonl"])
@pytest.mark.parametrize("ring", RINGS)
async def test_new_users_saving_at_once_make_the_keyring_once(
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    anyio_backend: str,
    ring: str,
    data: str,
) -> None:
    """Before: one warning (and one creation) per task that met the missing keyring, up to
    every one of them."""
    caplog.set_level(logging.WARNING, logger="storage.layers.encrypting")
    below = data_store(data, tmp_path)
    layer = EncryptingChatStorage(
        below,
        keys=MASTER,
        keyring=ring_url(request, ring, tmp_path, anyio_backend),
        create_keyring=True,
    )
    users = [f"u{n}" for n in range(USERS)]
    async with anyio.create_task_group() as tg:
        for user in users:
            tg.start_soon(layer.save, ChatKey(user, "s", "a"), ChatMessage("user", f"hi {user}"))
    assert creations(caplog) == 1
    assert await settled(layer, below, users) == USERS
    await layer.aclose()


@pytest.mark.parametrize("ring", RINGS)
async def test_init_keyring_called_at_once_makes_it_once(
    request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str, ring: str
) -> None:
    """Before: every call said it made the keyring."""
    layer = EncryptingChatStorage(
        AwaitingSQLite(tmp_path / "c.db"),
        keys=MASTER,
        keyring=ring_url(request, ring, tmp_path, anyio_backend),
    )
    results: list[tuple[bool, Any]] = []

    async def init() -> None:
        results.append(await layer.init_keyring())

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(init)
    assert sorted(made for made, _ in results) == [False] * 9 + [True]
    assert {state for _, state in results} == {await layer.keyring.state()}
    assert (await layer.keyring.state()).generation == 1
    await layer.aclose()


@pytest.mark.parametrize("ring", RINGS)
async def test_first_saves_of_one_user_at_once_make_one_key_and_one_generation(
    request: pytest.FixtureRequest, tmp_path: Path, anyio_backend: str, ring: str
) -> None:
    """Before: a keyring in a store (JSONL, Redis) raised the generation once per save that
    raced to make the user's first key (40 for one key), though one key won."""
    layer = EncryptingChatStorage(
        AwaitingSQLite(tmp_path / "c.db"),
        keys=MASTER,
        keyring=ring_url(request, ring, tmp_path, anyio_backend),
        create_keyring=True,
    )
    made, before = await layer.init_keyring()
    assert made
    async with anyio.create_task_group() as tg:
        for n in range(USERS):
            tg.start_soon(layer.save, ChatKey("ada", "s", f"a{n}"), ChatMessage("user", f"m{n}"))
    assert (await layer.keyring.state()).generation == before.generation + 1
    assert len(await layer.keyring.entries()) == 1
    for n in range(USERS):
        assert [m.text for m in await layer.fetch(ChatKey("ada", "s", f"a{n}"))] == [f"m{n}"]
    await layer.aclose()


# --- two processes ---------------------------------------------------------------------------

CHILD = """
import json, logging, os, sys, time
import anyio
from storage.config import open_storage
from storage.layers.encrypting import EncryptingChatStorage, SQLiteKeyring, StoreKeyring
from storage.message import ChatKey, ChatMessage
from storage.stores.sqlite import SQLiteChatStorage

mode, ring, data, tag, here, there, users = sys.argv[1:8]


async def meet():
    # Both processes reach the keyring's creation before either makes it: the race, every time.
    open(here, "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(there) and time.monotonic() < deadline:
        await anyio.sleep(0.001)


def meeting(base):
    class Meeting(base):
        async def create(self):
            await meet()
            return await super().create()

        async def create_if_absent(self):
            await meet()
            return await super().create_if_absent()

    return Meeting


def open_ring():
    if ring.startswith("sqlite:///"):
        return meeting(SQLiteKeyring)(ring[len("sqlite:///"):], location=ring)
    return meeting(StoreKeyring)(open_storage(ring).inner, ring)


class Count(logging.Handler):
    created = 0

    def emit(self, record):
        Count.created += "created the keyring" in record.getMessage()


async def main():
    logging.getLogger("storage.layers.encrypting").addHandler(Count())
    if mode == "url":  # the stack as deployed, started together
        stack = open_storage(
            f"encrypt?create_keyring=true&key_env=MK&keyring={ring}::sqlite:///{data}"
        )
        open(here, "w").close()
        while not os.path.exists(there):
            await anyio.sleep(0.001)
    else:
        stack = EncryptingChatStorage(
            SQLiteChatStorage(data), key_env="MK", keyring=open_ring(), create_keyring=True
        )
    made = None
    async with stack:
        if mode == "init":
            made = (await stack.init_keyring())[0]
        else:
            async with anyio.create_task_group() as tg:
                for n in range(int(users)):
                    key = ChatKey(f"{tag}{n}", "s", "a")
                    tg.start_soon(stack.save, key, ChatMessage("user", f"hi {tag}{n}"))
    print(json.dumps({"created": Count.created, "made": made}))

anyio.run(main)
"""


async def two_processes(mode: str, ring: str, tmp_path: Path, users: int) -> list[dict[str, Any]]:
    env = {**os.environ, "MK": MASTER, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    data = tmp_path / "c.db"
    marks = [tmp_path / "a.here", tmp_path / "b.here"]
    out: list[dict[str, Any]] = []

    async def child(tag: str, here: Path, there: Path) -> None:
        args = [mode, ring, str(data), tag, str(here), str(there), str(users)]
        done = await anyio.run_process(
            [sys.executable, "-c", CHILD, *args], env=env, check=False, stderr=subprocess.PIPE
        )
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
        out.append(json.loads(done.stdout.decode().splitlines()[-1]))

    async with anyio.create_task_group() as tg:
        tg.start_soon(child, "a", marks[0], marks[1])
        tg.start_soon(child, "b", marks[1], marks[0])
    return out


def process_ring(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> str:
    return ring_url(request, kind, tmp_path, "asyncio")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("ring", RINGS)
async def test_two_processes_initialising_at_once_make_the_keyring_once(
    request: pytest.FixtureRequest, tmp_path: Path, ring: str
) -> None:
    """Both processes find no keyring, then both create it (``chatlayers keys init`` twice):
    one says it made it, the other that it was there. Before: both said made."""
    out = await two_processes("init", process_ring(request, ring, tmp_path), tmp_path, 0)
    assert sorted(child["made"] for child in out) == [False, True]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("mode", ["met", "url"])
@pytest.mark.parametrize("ring", RINGS)
async def test_two_processes_of_new_users_make_the_keyring_once(
    request: pytest.FixtureRequest, tmp_path: Path, ring: str, mode: str
) -> None:
    """Two processes, many new users each, over one keyring that does not exist yet; ``met``:
    both reach its creation before either made it; ``url``: the deployed stack from its URL,
    started together. One warning across both. Before: one in each process."""
    location = process_ring(request, ring, tmp_path)
    out = await two_processes(mode, location, tmp_path, USERS)
    assert sum(child["created"] for child in out) == 1
    below = SQLiteChatStorage(tmp_path / "c.db")
    layer = EncryptingChatStorage(below, keys=MASTER, keyring=location)
    users = [f"{tag}{n}" for tag in "ab" for n in range(USERS)]
    assert await settled(layer, below, users) == 2 * USERS
    await layer.aclose()

"""Keyrings: the SQLite file keyring and a keyring in any store URL (memory, JSONL, a real Redis
server): never created by a read or a write, first writer wins, compare-and-set re-wrapping that
can never undo an erasure, a generation raised by every new key and erasure, erasure records
naming key ids only, and concurrent first saves of one new user agreeing on one data key."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import pytest

from storage.errors import ConfigError
from storage.layers.encrypting import (
    EncryptingChatStorage,
    KeyErasedError,
    Keyring,
    KeyringMissingError,
    SQLiteKeyring,
    StoreKeyring,
    WrappedKey,
    new_master_key,
    open_keyring,
)
from storage.message import ChatKey, ChatMessage
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage

pytestmark = pytest.mark.anyio

MASTER = new_master_key()


def entry(user: str, key_id: str, master: str = "m1") -> WrappedKey:
    return WrappedKey(user, key_id, master, bytes.fromhex(key_id) * 3)


async def check_keyring(ring: Keyring, *, ephemeral: bool = False) -> None:
    if not ephemeral:  # nothing makes a keyring but create()
        for attempt in (ring.state(), ring.get("u"), ring.add(entry("u", "aa" * 8))):
            with pytest.raises(KeyringMissingError, match="keys init"):
                await attempt
    made = await ring.create()
    assert await ring.create() == made  # an existing keyring is kept
    assert await ring.get("u") is None
    first = await ring.add(entry("u", "aa" * 8))
    assert (await ring.state()).generation == made.generation + 1
    assert await ring.add(entry("u", "bb" * 8)) == first  # the first writer wins
    assert (await ring.state()).generation == made.generation + 1
    assert (await ring.get("u")) == first
    moved = entry("u", "aa" * 8, "m2")
    assert not await ring.rewrap(moved, expected=entry("u", "cc" * 8))
    assert await ring.rewrap(moved, expected=first)
    assert await ring.get("u") == moved
    await ring.add(entry("v", "dd" * 8))
    assert [e.user_id for e in await ring.entries()] == ["u", "v"]
    assert not await ring.erased("aa" * 8)
    assert await ring.destroy("u") == "aa" * 8
    assert await ring.destroy("u") is None
    assert await ring.erased("aa" * 8)
    assert not await ring.erased("dd" * 8)
    assert (await ring.state()).generation == made.generation + 3
    assert (await ring.advance(2)).generation == made.generation + 3  # never lowered
    assert (await ring.advance(100)) == type(made)(made.keyring_id, 100)
    assert await ring.get("u") is None
    # A rotation that read the entry before the erasure cannot bring it back.
    assert not await ring.rewrap(entry("u", "aa" * 8, "m3"), expected=moved)
    assert await ring.get("u") is None
    assert [e.user_id for e in await ring.entries()] == ["v"]
    await ring.aclose()


async def test_sqlite_keyring(tmp_path: Path) -> None:
    ring = open_keyring(str(tmp_path / "deep" / "k.db"))
    assert isinstance(ring, SQLiteKeyring)
    await check_keyring(ring)
    assert (tmp_path / "deep" / "k.db").stat().st_mode & 0o777 == 0o600
    assert isinstance(open_keyring(f"sqlite:///{tmp_path / 'k2.db'}"), SQLiteKeyring)
    with pytest.raises(ConfigError, match="lose every data key"):
        open_keyring("sqlite://:memory:")


async def test_memory_store_keyring() -> None:
    ring = open_keyring("memory://")
    assert isinstance(ring, StoreKeyring)
    await check_keyring(ring, ephemeral=True)  # made with the process: nothing earlier exists


async def test_jsonl_store_keyring(tmp_path: Path) -> None:
    ring = open_keyring(f"jsonl://{tmp_path / 'keys'}")
    assert isinstance(ring, StoreKeyring)
    await check_keyring(ring)


@pytest.mark.redis
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_redis_store_keyring_under_a_sqlite_data_store(
    redis_url: str, tmp_path: Path
) -> None:
    prefix = f"ring{uuid.uuid4().hex[:8]}"
    await check_keyring(open_keyring(f"{redis_url}?prefix={prefix}-a"))
    await open_keyring(f"{redis_url}?prefix={prefix}").create()
    location = f"{redis_url}?prefix={prefix}"
    layer = EncryptingChatStorage(
        SQLiteChatStorage(tmp_path / "c.db"), keys=MASTER, keyring=location, create_keyring=True
    )
    key = ChatKey("ada", "s", "a")
    await layer.save(key, ChatMessage("user", "hello"))
    rows = await layer.inner.fetch(key)
    other = EncryptingChatStorage(
        SQLiteChatStorage(tmp_path / "c.db"), keys=MASTER, keyring=location, create_keyring=True
    )
    assert [m.text for m in await other.fetch(key)] == ["hello"]
    await other.delete_user("ada")
    await layer.inner.save_messages(key, rows)  # a restored backup
    with pytest.raises(KeyErasedError):
        await layer.fetch(key)
    await layer.aclose()
    await other.aclose()


@pytest.mark.parametrize("ring_kind", ["sqlite", "memory-store"])
async def test_concurrent_first_saves_of_a_new_user_agree_on_one_key(
    tmp_path: Path, ring_kind: str
) -> None:
    base = InMemoryChatStorage()
    ring: Keyring | Path = (
        tmp_path / "k.db" if ring_kind == "sqlite" else StoreKeyring(InMemoryChatStorage(), "m")
    )
    layers = [
        EncryptingChatStorage(base, keys=MASTER, keyring=ring, create_keyring=True)
        for _ in range(4)
    ]
    async with anyio.create_task_group() as tg:
        for n, layer in enumerate(layers):
            tg.start_soon(
                layer.save, ChatKey("new-user", "s", f"agent{n}"), ChatMessage("user", f"m{n}")
            )
    for layer in layers:
        merged = await layer.fetch_all_chats("new-user", "s")
        assert sorted(m.message.text for m in merged) == ["m0", "m1", "m2", "m3"]


CHILD = """
import sys, anyio
from storage import open_storage
from storage.message import ChatKey, ChatMessage

async def main(url, agent):
    async with open_storage(url) as stack:
        for n in range(10):
            await stack.save(ChatKey("new-user", "s", agent), ChatMessage("user", f"{agent}-{n}"))

anyio.run(main, sys.argv[1], sys.argv[2])
"""


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_processes_creating_the_keyring_and_a_users_key_at_once_agree(
    tmp_path: Path,
) -> None:
    import os
    import sys

    ring, data = tmp_path / "ring" / "k.db", tmp_path / "c.db"
    url = f"encrypt?create_keyring=true&keyring={ring}::sqlite:///{data}"
    env = {**os.environ, "CHATLAYERS_MASTER_KEYS": MASTER}
    results: list[int] = []

    async def child(agent: str) -> None:
        done = await anyio.run_process(
            [sys.executable, "-c", CHILD, url, agent], env=env, check=False
        )
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        results.append(done.returncode)

    async with anyio.create_task_group() as tg:
        for n in range(4):
            tg.start_soon(child, f"agent{n}")
    assert results == [0, 0, 0, 0]
    layer = EncryptingChatStorage(
        SQLiteChatStorage(tmp_path / "c.db"),
        keys=MASTER,
        keyring=tmp_path / "ring" / "k.db",
        create_keyring=True,
    )
    merged = await layer.fetch_all_chats("new-user", "s")
    assert sorted(m.message.text for m in merged) == sorted(
        f"agent{a}-{n}" for a in range(4) for n in range(10)
    )
    assert len(await layer.keyring.entries()) == 1  # one data key, agreed by every process
    await layer.aclose()


async def test_an_erasure_finding_no_key_never_removes_one_another_worker_adds_meanwhile(
    tmp_path: Path,
) -> None:
    """Worker A erases a user who has no key yet; worker B's first key for the user lands
    between A's read and the end of its erasure: B's key stays (without an erasure record
    its data would read as lost, not erased)."""
    from storage.stores.jsonl import JsonlChatStorage

    url = f"jsonl://{tmp_path / 'ring'}"
    b_ring = StoreKeyring(JsonlChatStorage(tmp_path / "ring"), url)
    await b_ring.create()
    entry = WrappedKey("ada", "k" * 16, "m" * 16, b"wrapped")

    class Racing(StoreKeyring):
        async def _current(self, user_id: str) -> tuple[str, WrappedKey | None]:
            found = await super()._current(user_id)
            await b_ring.add(entry)  # B's first key lands right after A looked
            return found

    a_ring = Racing(JsonlChatStorage(tmp_path / "ring"), url)
    assert await a_ring.destroy("ada") is None  # nothing was there to destroy
    assert await b_ring.get("ada") == entry
    assert not await b_ring.erased(entry.key_id)

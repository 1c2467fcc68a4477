"""Encryption never strands data: a missing keyring is an error, never a new empty one; a
keyring restored from an older backup (or another keyring) is refused; a lost data key is
told from an erased one; a user erased and back reads their new conversation. Each on SQLite
and JSONL keyrings over SQLite and JSONL data stores, through the public API."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from storage import open_storage
from storage.errors import StorageUnavailableError
from storage.layers.encrypting import (
    DataKeyMissingError,
    EncryptingChatStorage,
    KeyErasedError,
    KeyringMismatchError,
    KeyringMissingError,
    new_master_key,
)
from storage.message import ChatKey, ChatMessage
from storage.stores.jsonl import JsonlChatStorage
from storage.stores.sqlite import SQLiteChatStorage

pytestmark = pytest.mark.anyio

MASTER = new_master_key()
ADA = ChatKey("ada", "s", "a")
BOB = ChatKey("bob", "s", "a")
KINDS = ["sqlite", "jsonl"]


def ring(tmp: Path, kind: str) -> str:
    """The keyring's location, on the "volume" ``tmp/ring``."""
    return str(tmp / "ring" / "keys.db") if kind == "sqlite" else f"jsonl://{tmp / 'ring' / 'keys'}"


def layer(tmp: Path, kind: str, **options: Any) -> EncryptingChatStorage:
    data: Any = (
        SQLiteChatStorage(tmp / "data" / "c.db")
        if kind == "sqlite"
        else JsonlChatStorage(tmp / "data" / "j")
    )
    return EncryptingChatStorage(data, keys=MASTER, keyring=ring(tmp, kind), **options)


def files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def unmount(tmp: Path) -> None:
    """The keyring's volume goes away: an empty mount point is left."""
    (tmp / "ring").rename(tmp / "away")
    (tmp / "ring").mkdir()


def remount(tmp: Path) -> None:
    shutil.rmtree(tmp / "ring")
    (tmp / "away").rename(tmp / "ring")


async def texts(store: Any, key: ChatKey) -> list[str]:
    return [m.text for m in await store.fetch(key)]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_missing_keyring_is_an_error_and_nothing_is_created(
    tmp_path: Path, kind: str
) -> None:
    async with layer(tmp_path, kind, create_keyring=True) as first:
        await first.save(ADA, ChatMessage("user", "hello"))
    unmount(tmp_path)
    second = layer(tmp_path, kind)
    with pytest.raises(KeyringMissingError) as caught:
        await second.fetch(ADA)
    assert isinstance(caught.value, StorageUnavailableError)
    assert ring(tmp_path, kind) in str(caught.value)
    assert "chatlayers keys init" in str(caught.value)  # how to make one on purpose
    for attempt in (
        second.save(ADA, ChatMessage("user", "more")),
        second.save(BOB, ChatMessage("user", "a new user")),
        second.delete_user("ada"),
    ):
        with pytest.raises(KeyringMissingError):
            await attempt
    # Even a deployment that always asks for a keyring does not start one over the data.
    third = layer(tmp_path, kind, create_keyring=True)
    with pytest.raises(KeyringMissingError, match="no new keyring is made"):
        await third.save(BOB, ChatMessage("user", "a new user"))
    assert files(tmp_path / "ring") == []
    await second.aclose()
    await third.aclose()
    remount(tmp_path)
    async with layer(tmp_path, kind) as fourth:
        assert await texts(fourth, ADA) == ["hello"]
        assert await fourth.fetch(BOB) == []


@pytest.mark.parametrize("kind", KINDS)
async def test_a_new_deployment_makes_its_keyring_on_request(tmp_path: Path, kind: str) -> None:
    with pytest.raises(KeyringMissingError, match="create_keyring=True"):
        await layer(tmp_path, kind).save(ADA, ChatMessage("user", "hi"))
    data = (
        f"sqlite:///{tmp_path / 'data' / 'c.db'}"
        if kind == "sqlite"
        else f"jsonl://{tmp_path / 'data' / 'j'}"
    )
    url = f"encrypt?keys={MASTER}&create_keyring=true&keyring={ring(tmp_path, kind)}::{data}"
    async with open_storage(url) as stack:
        await stack.save(ADA, ChatMessage("user", "hi"))
    async with layer(tmp_path, kind) as again:  # from then on, without the option
        assert await texts(again, ADA) == ["hi"]
        made, state = await again.init_keyring()
        assert not made
        assert state == await again.keyring_state()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_keyring_restored_from_an_older_backup_is_refused(
    tmp_path: Path, kind: str
) -> None:
    async with layer(tmp_path, kind, create_keyring=True) as first:
        await first.save(ADA, ChatMessage("user", "before the backup"))
    shutil.copytree(tmp_path / "ring", tmp_path / "backup")
    async with layer(tmp_path, kind) as first:
        await first.save(BOB, ChatMessage("user", "a user made after the backup"))
        await first.save(ADA, ChatMessage("user", "after the backup"))
    shutil.move(tmp_path / "ring", tmp_path / "newest")
    shutil.copytree(tmp_path / "backup", tmp_path / "ring")  # the restore
    restored = layer(tmp_path, kind)
    with pytest.raises(KeyringMismatchError, match="older than the data") as caught:
        await restored.fetch(BOB)
    assert isinstance(caught.value, StorageUnavailableError)
    assert "keys accept" in str(caught.value)
    for attempt in (
        restored.save(BOB, ChatMessage("user", "would get a new key")),
        restored.fetch(ADA),
        restored.save(ChatKey("carol", "s", "a"), ChatMessage("user", "new")),
    ):
        with pytest.raises(KeyringMismatchError):
            await attempt
    await restored.aclose()
    shutil.rmtree(tmp_path / "ring")
    shutil.move(tmp_path / "newest", tmp_path / "ring")  # the newest copy found again
    async with layer(tmp_path, kind) as fixed:
        assert await texts(fixed, BOB) == ["a user made after the backup"]
        assert await texts(fixed, ADA) == ["before the backup", "after the backup"]


@pytest.mark.parametrize("kind", KINDS)
async def test_an_accepted_older_keyring_tells_lost_keys_from_erased_ones(
    tmp_path: Path, kind: str
) -> None:
    carol = ChatKey("carol", "s", "a")
    async with layer(tmp_path, kind, create_keyring=True) as first:
        await first.save(ADA, ChatMessage("user", "kept"))
        await first.save(carol, ChatMessage("user", "to be erased"))
        carols_rows = await first.inner.fetch(carol)
        await first.delete_user("carol")
    shutil.copytree(tmp_path / "ring", tmp_path / "backup")
    async with layer(tmp_path, kind) as first:
        await first.save(BOB, ChatMessage("user", "made after the backup"))
    shutil.rmtree(tmp_path / "ring")
    shutil.copytree(tmp_path / "backup", tmp_path / "ring")  # the newest keyring is lost
    async with layer(tmp_path, kind) as restored:
        before, after = await restored.accept_keyring()
        assert after.generation > before.generation
        assert await texts(restored, ADA) == ["kept"]
        with pytest.raises(DataKeyMissingError) as caught:  # lost, not erased
            await restored.fetch(BOB)
        assert not isinstance(caught.value, KeyErasedError)
        assert "delete_user('bob')" in str(caught.value)
        with pytest.raises(DataKeyMissingError, match="a save for user 'bob' is refused"):
            await restored.save(BOB, ChatMessage("user", "would sit beside unreadable data"))
        # An erasure the keyring recorded still reads as one (a restored copy of the data).
        await restored.inner.save_messages(carol, carols_rows)
        with pytest.raises(KeyErasedError, match="was erased"):
            await restored.fetch(carol)
        await restored.delete_user("bob")  # what the error says to do
        await restored.save(BOB, ChatMessage("user", "bob starts again"))
        assert await texts(restored, BOB) == ["bob starts again"]


@pytest.mark.parametrize("kind", KINDS)
async def test_another_keyring_is_refused(tmp_path: Path, kind: str) -> None:
    async with layer(tmp_path, kind, create_keyring=True) as first:
        await first.save(ADA, ChatMessage("user", "hello"))
    async with layer(tmp_path / "other", kind, create_keyring=True) as other:
        await other.save(ADA, ChatMessage("user", "another deployment"))
    shutil.move(tmp_path / "ring", tmp_path / "mine")
    shutil.copytree(tmp_path / "other" / "ring", tmp_path / "ring")
    wrong = layer(tmp_path, kind)
    with pytest.raises(KeyringMismatchError, match="not the one this data store was written"):
        await wrong.fetch(ADA)
    with pytest.raises(KeyringMismatchError):
        await wrong.save(BOB, ChatMessage("user", "would be sealed with the wrong keyring"))
    await wrong.aclose()


@pytest.mark.parametrize("kind", KINDS)
async def test_an_erased_user_who_comes_back_reads_their_new_conversation(
    tmp_path: Path, kind: str
) -> None:
    async with layer(tmp_path, kind, create_keyring=True) as store:
        await store.save(ADA, ChatMessage("user", "old"))
        leftover = await store.inner.fetch(ADA)  # what a save racing the erasure left
        await store.delete_user("ada")
        await store.inner.save_messages(ADA, leftover)
        with pytest.raises(KeyErasedError):  # erased, and not back: an erased copy
            await store.fetch(ADA)
        await store.save(ADA, ChatMessage("user", "new"))
        await store.save(ADA, ChatMessage("assistant", "welcome back"))
        assert await texts(store, ADA) == ["new", "welcome back"]
        assert [m.text for m in await store.fetch(ADA, limit=1)] == ["welcome back"]
        merged = await store.fetch_all_chats("ada", "s")
        assert [m.message.text for m in merged] == ["new", "welcome back"]
        tail = await store.fetch_since(ADA, 0)  # each seq beside its own message
        raw = await store.inner.fetch_since(ADA, 0)  # type: ignore[attr-defined]
        assert [m.text for m in tail.messages] == ["new", "welcome back"]
        assert tail.seqs == raw.seqs[1:]
    async with layer(tmp_path, kind) as cold:
        assert await texts(cold, ADA) == ["new", "welcome back"]


@pytest.mark.redis
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_missing_server_keyring_is_named_with_its_password_redacted(
    tmp_path: Path, redis_server_factory: Any
) -> None:
    password = "s3cret-keyring-pw"
    server = redis_server_factory(tmp_path / "redis", password=password)
    server.start()
    location = f"{server.url}?prefix=keyring"  # a server that holds no keyring (flushed?)
    stack = EncryptingChatStorage(
        SQLiteChatStorage(tmp_path / "c.db"), keys=MASTER, keyring=location
    )
    with pytest.raises(KeyringMissingError) as caught:
        await stack.save(ADA, ChatMessage("user", "hi"))
    message = str(caught.value)
    assert password not in message
    assert f"redis://:***@127.0.0.1:{server.port}/0" in message
    assert "keys init" in message
    await stack.aclose()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_save_beside_unreadable_data_is_refused_after_a_rewind_too(
    tmp_path: Path, kind: str
) -> None:
    """The check reads the user's newest message; a rewind hides the newest sequence
    numbers, so the check reads the newest visible one instead of finding nothing."""
    async with layer(tmp_path, kind, create_keyring=True) as first:
        await first.save(ADA, ChatMessage("user", "kept"))
    shutil.copytree(tmp_path / "ring", tmp_path / "backup")
    async with layer(tmp_path, kind) as first:
        await first.save(BOB, ChatMessage("user", "made after the backup", id="b1"))
        await first.save(BOB, ChatMessage("assistant", "hidden by the rewind", id="b2"))
        assert await first.rewind(BOB, "b1") == 1
    shutil.rmtree(tmp_path / "ring")
    shutil.copytree(tmp_path / "backup", tmp_path / "ring")  # the newest keyring is lost
    async with layer(tmp_path, kind) as restored:
        await restored.accept_keyring()
        with pytest.raises(DataKeyMissingError, match="a save for user 'bob' is refused"):
            await restored.save(BOB, ChatMessage("user", "would sit beside unreadable data"))

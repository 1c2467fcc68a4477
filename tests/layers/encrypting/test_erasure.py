"""Crypto-shredding: ``delete_user`` destroys the user's data key, so every copy of their ciphertext
made before (a backup of the SQLite files, a copy of a JSONL directory) becomes unreadable while
every other user's stays readable; byte-level checks that no message's plaintext is in any data
file."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from storage.errors import StorageUnavailableError
from storage.layers.encrypting import EncryptingChatStorage, KeyErasedError, new_master_key
from storage.message import ChatKey, ChatMessage
from storage.stores.jsonl import JsonlChatStorage
from storage.stores.sqlite import SQLiteChatStorage

pytestmark = pytest.mark.anyio

MASTER = new_master_key()
USERS = ("erased-user", "kept-user-1", "kept-user-2")


def conversation(user: str, session: int) -> list[ChatMessage]:
    return [
        ChatMessage("user", f"plaintext-{user}-{session}-question"),
        ChatMessage("assistant", f"plaintext-{user}-{session}-answer"),
    ]


async def fill(layer: EncryptingChatStorage) -> dict[ChatKey, list[ChatMessage]]:
    saved: dict[ChatKey, list[ChatMessage]] = {}
    for user in USERS:
        for session in range(3):
            key = ChatKey(user, f"s{session}", "agent")
            saved[key] = await layer.save_messages(key, conversation(user, session))
    return saved


def all_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def assert_no_plaintext(root: Path) -> None:
    data = all_bytes(root)
    assert len(data) > 1000  # there are files, and they hold the ciphertext
    assert b"plaintext-" not in data


async def check_copy(copy: Any, keyring: Path, saved: dict[ChatKey, list[ChatMessage]]) -> None:
    """A stack over the copy with the live keyring reads every kept user's messages and none
    of the erased user's."""
    layer = EncryptingChatStorage(copy, keys=MASTER, keyring=keyring, create_keyring=True)
    try:
        keys = await layer.list_keys()
        assert {k.user_id for k in keys} == set(USERS)  # the copy still holds the ciphertext
        for key, messages in saved.items():
            if key.user_id == "erased-user":
                with pytest.raises(KeyErasedError, match="erased"):
                    await layer.fetch(key)
                with pytest.raises(KeyErasedError):
                    await layer.fetch_all_chats(key.user_id, key.session_id)
            else:
                assert await layer.fetch(key) == messages
    finally:
        await layer.aclose()


async def test_a_sqlite_backup_taken_before_delete_user_loses_only_the_erased_user(
    tmp_path: Path,
) -> None:
    data, backup, keyring = tmp_path / "data", tmp_path / "backup", tmp_path / "ring" / "k.db"
    layer = EncryptingChatStorage(
        SQLiteChatStorage(data / "chats.db"), keys=MASTER, keyring=keyring, create_keyring=True
    )
    saved = await fill(layer)
    backup.mkdir()
    for path in data.iterdir():  # chats.db, chats.db-wal, chats.db-shm: a crash-consistent copy
        shutil.copy2(path, backup / path.name)
    assert (backup / "chats.db-wal").exists()
    await layer.delete_user("erased-user")
    assert await layer.fetch(ChatKey("erased-user", "s0", "agent")) == []
    await layer.aclose()
    assert_no_plaintext(data)
    assert_no_plaintext(backup)
    await check_copy(SQLiteChatStorage(backup / "chats.db"), keyring, saved)
    # The keyring file itself holds no trace of the destroyed entry (secure_delete + WAL wiped).
    ring_bytes = all_bytes(keyring.parent)
    assert b"erased-user" not in ring_bytes
    assert b"kept-user-1" in ring_bytes


async def test_a_jsonl_copy_taken_before_delete_user_loses_only_the_erased_user(
    tmp_path: Path,
) -> None:
    data, copy, keyring = tmp_path / "data", tmp_path / "copy", tmp_path / "ring" / "k.db"
    layer = EncryptingChatStorage(
        JsonlChatStorage(data), keys=MASTER, keyring=keyring, create_keyring=True
    )
    saved = await fill(layer)
    shutil.copytree(data, copy)
    await layer.delete_user("erased-user")
    await layer.aclose()
    assert_no_plaintext(data)
    assert_no_plaintext(copy)
    await check_copy(JsonlChatStorage(copy), keyring, saved)


async def test_an_erasure_by_another_instance_is_seen_at_once(tmp_path: Path) -> None:
    keyring = tmp_path / "k.db"
    first = EncryptingChatStorage(
        SQLiteChatStorage(tmp_path / "c.db"), keys=MASTER, keyring=keyring, create_keyring=True
    )
    second = EncryptingChatStorage(
        SQLiteChatStorage(tmp_path / "c.db"), keys=MASTER, keyring=keyring, create_keyring=True
    )
    key = ChatKey("erased-user", "s", "a")
    await first.save(key, ChatMessage("user", "before"))
    rows = await first.inner.fetch(key)
    assert [m.text for m in await second.fetch(key)] == ["before"]
    await second.delete_user("erased-user")
    # ``first`` had the key cached: it must neither read old copies nor write under it.
    await first.inner.save_messages(ChatKey("erased-user", "restored", "a"), rows)
    with pytest.raises(KeyErasedError):
        await first.fetch(ChatKey("erased-user", "restored", "a"))
    await first.save(key, ChatMessage("user", "after"))  # a new data key
    assert [m.text for m in await second.fetch(key)] == ["after"]
    await first.aclose()
    await second.aclose()


async def test_delete_user_from_another_process_shreds_the_copy(tmp_path: Path) -> None:
    data, backup, keyring = tmp_path / "data", tmp_path / "backup", tmp_path / "k.db"
    layer = EncryptingChatStorage(
        SQLiteChatStorage(data / "c.db"), keys=MASTER, keyring=keyring, create_keyring=True
    )
    saved = await fill(layer)
    await layer.aclose()
    shutil.copytree(data, backup)
    url = f"encrypt?create_keyring=true&keyring={keyring}::sqlite:///{data / 'c.db'}"
    env = {**os.environ, "CHATLAYERS_MASTER_KEYS": MASTER}
    done = await anyio.run_process(
        [
            sys.executable,
            "-c",
            "import sys; from storage.cli import main; sys.exit(main(sys.argv[1:]))",
            "delete",
            "--user",
            "erased-user",
            "--yes",
            "--url",
            url,
        ],
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    await check_copy(SQLiteChatStorage(backup / "c.db"), keyring, saved)


async def test_delete_user_is_idempotent_and_the_user_can_come_back(tmp_path: Path) -> None:
    layer = EncryptingChatStorage(
        SQLiteChatStorage(tmp_path / "c.db"),
        keys=MASTER,
        keyring=tmp_path / "k.db",
        create_keyring=True,
    )
    key = ChatKey("erased-user", "s", "a")
    await layer.save(key, ChatMessage("user", "one"))
    first_key = await layer.keyring.get("erased-user")
    await layer.delete_user("erased-user")
    await layer.delete_user("erased-user")
    assert await layer.keyring.get("erased-user") is None
    await layer.save(key, ChatMessage("user", "two"))
    second_key = await layer.keyring.get("erased-user")
    assert first_key is not None
    assert second_key is not None
    assert second_key.key_id != first_key.key_id
    assert [m.text for m in await layer.fetch(key)] == ["two"]
    await layer.aclose()


def sealed(store: SQLiteChatStorage, keyring: Path) -> EncryptingChatStorage:
    return EncryptingChatStorage(store, keys=MASTER, keyring=keyring, create_keyring=True)


def summarizing_worker(below: EncryptingChatStorage) -> Any:
    """A summarizing worker over ``below``: a summary past 3 pairs, the last turn kept."""
    from storage.layers.summarizing import SummarizingChatStorage
    from summarizers import ExtractiveSummarizer

    return SummarizingChatStorage(below, ExtractiveSummarizer(), trigger_at=3, keep_last=1)


class _DeleteFails(SQLiteChatStorage):
    """The store's part of an erasure fails (locked, unreachable): the key is gone already."""

    async def delete_user(self, user_id: str) -> None:
        raise StorageUnavailableError("database is locked")


async def test_a_warm_summarizing_worker_never_seals_erased_text_into_a_summary(
    tmp_path: Path,
) -> None:
    # Another instance destroyed the user's key but failed to delete the record: no head
    # changed, so worker A's cached view still holds the plaintext. Its next summary is made
    # of what the layers below serve now, never of that cache.
    keyring, db = tmp_path / "k.db", tmp_path / "c.db"

    key = ChatKey("erased-user", "s", "a")
    worker = summarizing_worker(sealed(SQLiteChatStorage(db), keyring))
    eraser = sealed(_DeleteFails(db), keyring)
    async with worker:
        await worker.save_messages(key, conversation("erased-user", 0))
        assert "plaintext-erased-user-0-question" in (await worker.fetch(key))[0].text
        with pytest.raises(StorageUnavailableError):
            await eraser.delete_user("erased-user")
        for turn in range(1, 5):
            await worker.save_messages(key, conversation("other", turn))
        view = await worker.fetch(key)
        assert view[0].is_summary  # a summary was made after the erasure
        assert "plaintext-erased" not in " ".join(m.text for m in view)
    fresh = summarizing_worker(sealed(SQLiteChatStorage(db), keyring))
    async with fresh:
        served = " ".join(m.text for m in await fresh.fetch(key))
        assert "plaintext-other-4-answer" in served
        assert "plaintext-erased" not in served
    await eraser.aclose()


_KILLED_ERASER = """
import os, signal, sys
import anyio
from storage.layers.encrypting import EncryptingChatStorage
from storage.stores.sqlite import SQLiteChatStorage

class KilledMidErasure(SQLiteChatStorage):
    async def delete_user(self, user_id):
        os.kill(os.getpid(), signal.SIGKILL)  # after the key's destruction, before this

async def main(db, keyring):
    layer = EncryptingChatStorage(KilledMidErasure(db), keyring=keyring)
    await layer.delete_user("erased-user")

anyio.run(main, sys.argv[1], sys.argv[2])
"""


async def test_an_eraser_killed_between_the_key_and_the_data_leaves_nothing_readable(
    tmp_path: Path,
) -> None:
    # kill -9 after the key is destroyed, before the store's delete: the erased user's
    # messages are unreadable at once in every instance (a warm one included), everyone
    # else's read, and `chatlayers delete` run again finishes the erasure.
    data, keyring = tmp_path / "data", tmp_path / "k.db"
    db = data / "c.db"
    warm = EncryptingChatStorage(
        SQLiteChatStorage(db), keys=MASTER, keyring=keyring, create_keyring=True
    )
    saved = await fill(warm)
    erased = ChatKey("erased-user", "s0", "agent")
    assert await warm.fetch(erased) == saved[erased]  # cached in this process
    env = {**os.environ, "CHATLAYERS_MASTER_KEYS": MASTER}
    killed = await anyio.run_process(
        [sys.executable, "-c", _KILLED_ERASER, str(db), str(keyring)], env=env, check=False
    )
    assert killed.returncode == -9, killed.stderr.decode()
    fresh = EncryptingChatStorage(SQLiteChatStorage(db), keys=MASTER, keyring=keyring)
    for layer in (warm, fresh):
        assert {k.user_id for k in await layer.list_keys()} == set(USERS)  # data still there
        for key, messages in saved.items():
            if key.user_id == "erased-user":
                with pytest.raises(KeyErasedError, match="call it again"):
                    await layer.fetch(key)
            else:
                assert await layer.fetch(key) == messages
    await fresh.aclose()
    url = f"encrypt?keyring={keyring}::sqlite:///{db}"
    again = await anyio.run_process(
        [
            sys.executable,
            "-c",
            "import sys; from storage.cli import main; sys.exit(main(sys.argv[1:]))",
            *("delete", "--user", "erased-user", "--yes", "--url", url),
        ],
        env=env,
        check=False,
    )
    assert again.returncode == 0, again.stderr.decode()
    assert {k.user_id for k in await warm.list_keys()} == set(USERS) - {"erased-user"}
    assert await warm.fetch(erased) == []
    assert_no_plaintext(data)
    await warm.save(erased, ChatMessage("user", "back again"))  # the user can come back
    assert [m.text for m in await warm.fetch(erased)] == ["back again"]
    await warm.aclose()


async def test_a_warm_summarizing_worker_stops_serving_a_user_whose_key_another_process_erased(
    tmp_path: Path,
) -> None:
    # The eraser destroyed the key, its store delete failed: no raw head changed, yet the
    # worker's hot path (a head read, the view from memory) must not serve the plaintext it
    # holds. It raises what every other read raises until the erasure is finished.
    keyring, db = tmp_path / "k.db", tmp_path / "c.db"

    key, kept = ChatKey("erased-user", "s", "a"), ChatKey("kept-user-1", "s", "a")
    worker = summarizing_worker(sealed(SQLiteChatStorage(db), keyring))
    eraser = sealed(_DeleteFails(db), keyring)
    async with worker:
        for k in (key, kept):
            await worker.save_messages(k, conversation(k.user_id, 0))
            assert "plaintext" in (await worker.fetch(k))[0].text  # both views warm
        with pytest.raises(StorageUnavailableError):
            await eraser.delete_user("erased-user")
        for _ in range(2):
            with pytest.raises(KeyErasedError, match="call it again"):
                await worker.fetch(key)
        assert [m.text for m in await worker.fetch(kept)] == [
            "plaintext-kept-user-1-0-question",
            "plaintext-kept-user-1-0-answer",
        ]
        finisher = sealed(SQLiteChatStorage(db), keyring)
        await finisher.delete_user("erased-user")  # the retry finishes it
        assert await worker.fetch(key) == []
        await worker.save(key, ChatMessage("user", "back again"))
        assert [m.text for m in await worker.fetch(key)] == ["back again"]
    await finisher.aclose()
    await eraser.aclose()

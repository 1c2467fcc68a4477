"""The keyring kept apart from the data (a new user's report): a keyring whose files are,
lie inside, or contain the data store's files is refused whatever either store's type (a
JSONL keyring inside a JSONL data directory used to collide with the data of a user named
after its directory, and every copy of the data held every key); so is a keyring in the
same Redis prefix or PostgreSQL table. ``delete_user`` that fails after destroying the key
is finished by a retry."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from storage.config import open_storage
from storage.errors import ConfigError, StorageUnavailableError
from storage.layers.encrypting import EncryptingChatStorage, KeyErasedError, new_master_key
from storage.message import ChatKey, ChatMessage
from storage.stores.jsonl import JsonlChatStorage
from storage.stores.memory import InMemoryChatStorage

pytestmark = pytest.mark.anyio

MASTER = new_master_key()
APART = "keep the keyring in a file or directory of its own, outside the data"


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MK", MASTER)


def stack_url(keyring: str, data: str) -> str:
    return f"encrypt?create_keyring=true&key_env=MK&keyring={keyring}::{data}"


def test_the_reported_jsonl_keyring_inside_the_jsonl_data_dir_is_refused(
    tmp_path: Path,
) -> None:
    data = f"jsonl://{tmp_path}/jj2"
    with pytest.raises(ConfigError, match=APART):
        open_storage(stack_url(f"{data}/keys", data))


# (keyring as typed, data store URL) under tmp_path "T"; every pair overlaps.
OVERLAPPING = [
    ("jsonl://T/d/keys", "jsonl://T/d"),  # a jsonl keyring inside the jsonl data directory
    ("jsonl://T/d", "jsonl://T/d"),  # the same directory
    ("jsonl://T", "jsonl://T/d"),  # the keyring directory holds the data directory
    ("jsonl://T", "sqlite:///T/c.db"),  # ... or the data file
    ("jsonl://T/c.db", "sqlite:///T/c.db"),  # the data file's own path
    ("sqlite:///T/d/k.db", "jsonl://T/d"),  # a sqlite:// keyring inside the data directory
    ("T/d/k.db", "jsonl://T/d"),  # a keyring path inside it
    ("T/d", "jsonl://T/d"),  # the data directory itself as the keyring file
    ("T/d/sub/deeper/k.db", "jsonl://T/d"),
    ("T/c.db", "sqlite:///T/c.db"),  # the data file
    ("sqlite:///T/c.db", "sqlite:///T/c.db"),
    ("T/c.db-wal", "sqlite:///T/c.db"),  # the data file's write-ahead log
    ("T/link/k.db", "jsonl://T/d"),  # through a symbolic link to the data directory
]


@pytest.mark.parametrize(("keyring", "data"), OVERLAPPING)
def test_a_keyring_overlapping_the_data_files_is_refused(
    tmp_path: Path, keyring: str, data: str
) -> None:
    (tmp_path / "d").mkdir()
    os.symlink(tmp_path / "d", tmp_path / "link")
    url = stack_url(keyring.replace("T", str(tmp_path)), data.replace("T", str(tmp_path)))
    with pytest.raises(ConfigError, match=APART):
        open_storage(url)


@pytest.mark.parametrize(
    ("keyring", "data"),
    [
        ("jsonl://T/d-keys", "jsonl://T/d"),  # a sibling sharing a name prefix
        ("T/d.db", "jsonl://T/d"),
        ("jsonl://T/ring", "sqlite:///T/c.db"),
        ("T/c.db.keys", "sqlite:///T/c.db"),
    ],
)
async def test_a_keyring_beside_the_data_is_accepted(
    tmp_path: Path, keyring: str, data: str
) -> None:
    url = stack_url(keyring.replace("T", str(tmp_path)), data.replace("T", str(tmp_path)))
    key = ChatKey("keys", "s", "a")
    async with open_storage(url) as stack:
        await stack.save(key, ChatMessage("user", "hello"))
        await stack.delete_user("keys")
        assert await stack.fetch(key) == []


def test_a_jsonl_data_store_inside_a_keyring_object_directory_is_refused(
    tmp_path: Path,
) -> None:
    from storage.layers.encrypting import StoreKeyring

    ring = StoreKeyring(JsonlChatStorage(tmp_path / "ring"), "jsonl://ring")
    with pytest.raises(ConfigError, match="holds the data store"):
        EncryptingChatStorage(
            JsonlChatStorage(tmp_path / "ring" / "data"),
            keys=MASTER,
            keyring=ring,
            create_keyring=True,
        )


@pytest.mark.redis
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_redis_keyring_in_the_data_stores_prefix_is_refused(redis_url: str) -> None:
    prefix = f"p{uuid.uuid4().hex[:8]}"
    data = f"{redis_url}?prefix={prefix}"
    loopback = redis_url.replace("localhost", "127.0.0.1")
    if loopback == redis_url:
        loopback = redis_url.replace("127.0.0.1", "localhost")
    for keyring in (data, f"{loopback}?prefix={prefix}"):
        with pytest.raises(ConfigError, match="is the data store itself"):
            open_storage(stack_url(keyring, data))
    # The default prefix, spelt out or not, is one prefix.
    with pytest.raises(ConfigError, match="is the data store itself"):
        open_storage(stack_url(f"{redis_url}?prefix=chatlayers", redis_url))
    async with open_storage(stack_url(f"{redis_url}?prefix={prefix}-keys", data)) as stack:
        key = ChatKey(f"u{prefix}", "s", "a")
        await stack.save(key, ChatMessage("user", "hi"))
        assert [m.text for m in await stack.fetch(key)] == ["hi"]
        await stack.delete_user(key.user_id)


@pytest.mark.postgres
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_postgres_keyring_in_the_data_stores_table_is_refused(postgres_dsn: str) -> None:
    schema = f"s{uuid.uuid4().hex[:8]}"
    sep = "&" if "?" in postgres_dsn else "?"
    data = f"{postgres_dsn}{sep}schema={schema}"
    with pytest.raises(ConfigError, match="is the data store itself"):
        open_storage(stack_url(data, data))
    # A keyring URL with several options is given in code (``&`` ends an option in a URL).
    from storage.stores.postgres import PostgresChatStorage

    default = f"{data}&table=chatlayers_messages"
    with pytest.raises(ConfigError, match="is the data store itself"):
        EncryptingChatStorage(
            PostgresChatStorage(data), keys=MASTER, keyring=default, create_keyring=True
        )
    moved = postgres_dsn.replace("127.0.0.1", "localhost") + f"{sep}schema={schema}"
    with pytest.raises(ConfigError, match="is the data store itself"):
        EncryptingChatStorage(
            PostgresChatStorage(data), keys=MASTER, keyring=moved, create_keyring=True
        )
    layer = EncryptingChatStorage(
        PostgresChatStorage(data), keys=MASTER, keyring=f"{data}&table=keyring", create_keyring=True
    )
    await layer.aclose()


class FlakyDelete(InMemoryChatStorage):
    """A store whose first ``delete_user`` fails (a server lost mid-erasure)."""

    fail = 1

    async def delete_user(self, user_id: str) -> None:
        if self.fail:
            self.fail -= 1
            raise StorageUnavailableError("memory://: the server went away")
        await super().delete_user(user_id)


async def test_a_delete_user_that_fails_after_the_key_is_destroyed_is_finished_by_a_retry(
    tmp_path: Path,
) -> None:
    base = FlakyDelete()
    layer = EncryptingChatStorage(base, keys=MASTER, keyring=tmp_path / "k.db", create_keyring=True)
    key = ChatKey("ada", "s", "a")
    kept = ChatKey("bob", "s", "a")
    await layer.save(key, ChatMessage("user", "secret"))
    await layer.save(kept, ChatMessage("user", "kept"))
    with pytest.raises(StorageUnavailableError) as caught:
        await layer.delete_user("ada")
    notes: Any = getattr(caught.value, "__notes__", [])
    assert any("delete_user('ada') again" in note for note in notes)
    # Half-way: the key is gone, the ciphertext still there; the error says what to do.
    with pytest.raises(KeyErasedError, match="call it again to finish"):
        await layer.fetch(key)
    other = EncryptingChatStorage(base, keys=MASTER, keyring=tmp_path / "k.db", create_keyring=True)
    await other.delete_user("ada")  # the retry (here from another instance) finishes it
    await layer.delete_user("ada")  # and a further one is a no-op
    assert await layer.fetch(key) == []
    assert {k.user_id for k in await layer.list_keys()} == {"bob"}
    assert [m.text for m in await layer.fetch(kept)] == ["kept"]
    await layer.save(key, ChatMessage("user", "back"))  # the user can come back
    assert [m.text for m in await other.fetch(key)] == ["back"]
    await layer.aclose()
    await other.keyring.aclose()

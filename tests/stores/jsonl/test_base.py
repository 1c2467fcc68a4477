"""JSONL store on ``BaseStore``: its own URL, ``describe`` as typed, errors from the tree, driver
errors translated in one place."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.abilities import ABILITIES, find_ability
from storage.errors import (
    ConfigError,
    InvalidArgumentError,
    InvalidKeyError,
    StorageUnavailableError,
)
from storage.message import ChatKey, ChatMessage
from storage.stores.base import BaseStore
from storage.stores.jsonl import JsonlChatStorage

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")


def test_is_a_base_store_with_every_ability(tmp_path: Path) -> None:
    store = JsonlChatStorage(tmp_path)
    assert isinstance(store, BaseStore)
    assert store.driver_errors == (OSError,)
    for ability in ABILITIES:
        assert find_ability(store, ability) is store, ability.__name__


async def test_from_url_absolute_and_relative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    absolute = JsonlChatStorage.from_url(f"jsonl://{tmp_path}/abs")
    assert absolute.root == str(tmp_path / "abs")
    assert absolute.describe() == f"jsonl://{tmp_path}/abs (fsync=batch)"
    assert "////" not in absolute.describe()
    monkeypatch.chdir(tmp_path)
    relative = JsonlChatStorage.from_url("jsonl://chats/here", fsync="always")
    assert relative.root == str(tmp_path / "chats" / "here")
    assert relative.describe() == "jsonl://chats/here (fsync=always)"
    await relative.save(KEY, ChatMessage("user", "hi"))
    assert (tmp_path / "chats" / "here" / "u" / "s" / "a.jsonl").exists()


def test_from_url_with_query_options_and_retention(tmp_path: Path) -> None:
    store = JsonlChatStorage.from_url(f"jsonl://{tmp_path}/q?retention=30d", retention="30d")
    assert store.retention == 30 * 86400
    assert store.describe() == f"jsonl://{tmp_path}/q (fsync=batch, retention=30d)"


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("/tmp/x", "not a jsonl://"),
        ("jsonl://", "no path"),
        ("jsonl:///tmp/x?fsink=always", "unknown option 'fsink'"),
    ],
)
def test_from_url_refuses_bad_urls(url: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        JsonlChatStorage.from_url(url)


def test_describe_of_a_store_built_in_code_is_one_slash_triple(tmp_path: Path) -> None:
    store = JsonlChatStorage(tmp_path)
    assert store.describe() == f"jsonl://{tmp_path} (fsync=batch)"
    assert store.describe().startswith("jsonl:///")
    assert not store.describe().startswith("jsonl:////")


def test_bad_options_are_invalid_arguments(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="fsync"):
        JsonlChatStorage(tmp_path, fsync="sometimes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="cache_bytes"):
        JsonlChatStorage(tmp_path, cache_bytes=-1)
    with pytest.raises(InvalidArgumentError, match="duration"):
        JsonlChatStorage(tmp_path, retention="soon")


async def test_bad_limit_and_key_raise_errors_of_the_tree(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        for bad in (-1, 1.5, True, "3"):
            with pytest.raises(InvalidArgumentError):
                await store.fetch(KEY, limit=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidKeyError):
            await store.fetch(("u", "s", "a"))  # type: ignore[arg-type]
        with pytest.raises(InvalidKeyError):
            await store.head("u/s/a")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            await store.fetch_since(KEY, -1)


async def test_os_errors_of_reads_become_unavailable(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        data = tmp_path / "u" / "s" / "a.jsonl"
        data.mkdir(parents=True)  # a directory where the file should be: reads fail
        for call in (
            store.fetch(KEY),
            store.fetch(KEY, limit=2),
            store.head(KEY),
            store.fetch_since(KEY, 5),
            store.fetch_records(KEY),
            store.search("u", "x"),
        ):
            with pytest.raises(StorageUnavailableError, match="Is a directory") as info:
                await call
            assert isinstance(info.value.__cause__, OSError)


async def test_os_errors_become_unavailable_on_abilities_too(tmp_path: Path) -> None:
    async with JsonlChatStorage(tmp_path) as store:
        (tmp_path / "blocked").write_text("a file where the user directory would go")
        key = ChatKey("blocked", "s", "a")
        for call in (
            store.head(key),
            store.fetch_since(key, 0),
            store.acquire_lease(key, "me", 5),
            store.replace(key, [ChatMessage("user", "x")]),
        ):
            with pytest.raises(StorageUnavailableError, match="Not a directory") as info:
                await call
            assert isinstance(info.value.__cause__, OSError)
            assert str(tmp_path) in str(info.value)


async def test_closed_store_refuses_every_ability(tmp_path: Path) -> None:
    store = JsonlChatStorage(tmp_path)
    await store.save(KEY, ChatMessage("user", "x"))
    await store.aclose()
    assert store.closed
    for call in (
        store.head(KEY),
        store.fetch_since(KEY, 0),
        store.list_sessions("u"),
        store.search("u", "x"),
        store.fetch_records(KEY),
        store.purge(),
        store.list_keys(),
        store.delete(KEY),
    ):
        with pytest.raises(StorageUnavailableError, match="closed"):
            await call

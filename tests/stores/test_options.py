"""Store options: a bad value is ``InvalidArgumentError`` from every store's constructor, and
config reports every bad store option of a URL at once (their ``Check`` annotations)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from storage.config import open_storage
from storage.errors import ConfigError, InvalidArgumentError
from storage.stores.jsonl import JsonlChatStorage
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage


def _redis(**options: Any) -> object:
    from storage.stores.redis import RedisChatStorage

    return RedisChatStorage("redis://localhost:1/0", **options)


def _postgres(**options: Any) -> object:
    from storage.stores.postgres import PostgresChatStorage

    return PostgresChatStorage("postgresql://localhost/db", **options)


def _cases(tmp: Path) -> list[tuple[Callable[..., object], dict[str, Any], str]]:
    return [
        (InMemoryChatStorage, {"retention": "soon"}, "duration"),
        (InMemoryChatStorage, {"purge_interval": -1}, "duration"),
        # A retention of zero would delete every message on the next write: refused alike.
        (InMemoryChatStorage, {"retention": 0}, "duration"),
        (lambda **o: SQLiteChatStorage(tmp / "x.db", **o), {"retention": "0s"}, "duration"),
        (lambda **o: JsonlChatStorage(tmp / "j", **o), {"retention": 0}, "duration"),
        (_postgres, {"retention": 0}, "duration"),
        (lambda **o: SQLiteChatStorage(tmp / "x.db", **o), {"busy_timeout": -1}, "busy_timeout"),
        (lambda **o: SQLiteChatStorage(tmp / "x.db", **o), {"cache_chars": -1}, "cache_chars"),
        (lambda **o: SQLiteChatStorage(tmp / "x.db", **o), {"synchronous": "x"}, "synchronous"),
        (lambda **o: JsonlChatStorage(tmp / "j", **o), {"fsync": "sometimes"}, "fsync"),
        (lambda **o: JsonlChatStorage(tmp / "j", **o), {"fsync_interval": -1}, "fsync_interval"),
        (lambda **o: JsonlChatStorage(tmp / "j", **o), {"max_cached_keys": 0}, "max_cached_keys"),
        (lambda **o: JsonlChatStorage(tmp / "j", **o), {"cache_bytes": -1}, "cache_bytes"),
        (_redis, {"prefix": "a}b"}, "prefix"),
        (_redis, {"ttl": 0}, "duration"),
        (_postgres, {"max_size": 0}, "max_size"),
        (_postgres, {"timeout": 0}, "timeout"),
        (_postgres, {"table": ""}, "table"),
    ]


def test_a_bad_option_is_invalid_argument_error_on_every_store(tmp_path: Path) -> None:
    for make, options, named in _cases(tmp_path):
        with pytest.raises(InvalidArgumentError, match=named):
            make(**options)


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("sqlite:///{tmp}/x.db?busy_timeout=-1&cache_chars=-5", ["busy_timeout", "cache_chars"]),
        (
            "jsonl://{tmp}/j?fsync_interval=-1&max_cached_keys=0&cache_bytes=-1",
            ["fsync_interval", "max_cached_keys", "cache_bytes"],
        ),
        ("postgresql://localhost/db?max_size=0&timeout=-1", ["max_size", "timeout"]),
    ],
)
def test_config_reports_every_bad_store_option_at_once(
    tmp_path: Path, url: str, named: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        open_storage(url.format(tmp=tmp_path))
    text = str(caught.value)
    for name in named:
        assert name in text, text
    assert not (tmp_path / "x.db").exists()  # nothing was built

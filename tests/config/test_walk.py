"""Config only resolves a store's name and calls its ``from_url``.

The store reads its own URL; config converts the options the store's constructor declares
(from the URL query or a config table) by their declared types, leaves undeclared query
parameters in the URL for the store (a driver's ``sslmode``), and knows no scheme.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, ClassVar, Self

import pytest

import storage.config.construct as construct_module
import storage.config.parse as parse_module
import storage.config.resolve as resolve_module
from storage.config import open_storage
from storage.config.registry import Registry
from storage.errors import ConfigError
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from storage.stores.urls import check_query, drop_query


class RecordingStore(InMemoryChatStorage):
    """A store (one class and one registry line) that records what ``from_url`` got."""

    calls: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    url_driver_options = True  # its URL takes a driver parameter (driver=) it reads itself

    def __init__(self, *, flag: bool = False, n: int = 1, name: str = "x") -> None:
        super().__init__()
        self.flag, self.n, self.name = flag, n, name

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        cls.calls.append((url, dict(options)))
        check_query(drop_query(url, options), "rec", {"driver"})
        return cls(**options)


@pytest.fixture
def reg() -> Registry:
    RecordingStore.calls.clear()
    registry = Registry(entry_points=False)
    registry.register("stores", "rec", RecordingStore)
    return registry


def test_config_knows_no_scheme() -> None:
    for name in ("PATH_SCHEMES", "NO_LOCATION_SCHEMES", "store_path", "has_location"):
        assert not hasattr(parse_module, name), name
    assert not hasattr(resolve_module, "_takes_positional")
    for module in (parse_module, resolve_module, construct_module):
        source = inspect.getsource(module)
        for scheme in ("sqlite", "jsonl", "memory", "redis", "postgres"):
            assert f'"{scheme}"' not in source, (module.__name__, scheme)


def test_from_url_gets_the_whole_url_and_typed_options(reg: Registry) -> None:
    url = "rec://host/db?flag=true&n=3&driver=keep"
    stack = open_storage(url, registry=reg)
    assert RecordingStore.calls == [(url, {"flag": True, "n": 3})]
    assert isinstance(stack.base, RecordingStore)
    assert (stack.base.flag, stack.base.n) == (True, 3)


def test_table_options_are_converted_too(reg: Registry) -> None:
    open_storage({"store": {"url": "rec://?name=a", "n": 4, "flag": "yes"}}, registry=reg)
    assert RecordingStore.calls == [("rec://?name=a", {"name": "a", "n": 4, "flag": True})]
    with pytest.raises(ConfigError, match=r"has no option 'nn' \(did you mean 'n'\?\)"):
        open_storage({"store": {"url": "rec://", "nn": 4}}, registry=reg)
    with pytest.raises(ConfigError, match="option 'n' must be an integer"):
        open_storage("rec://?n=three", registry=reg)
    assert RecordingStore.calls == [("rec://?name=a", {"name": "a", "n": 4, "flag": True})]


def test_undeclared_query_parameters_are_the_stores_to_judge(reg: Registry) -> None:
    with pytest.raises(ConfigError, match="unknown option 'bogus'"):
        open_storage("rec://h?bogus=1", registry=reg)


def test_sqlite_two_slashes_shows_the_right_spelling() -> None:
    with pytest.raises(ConfigError, match=r"sqlite:///x\.db"):
        open_storage("sqlite://x.db")


def test_file_store_refuses_unknown_query_option(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="did you mean 'synchronous'"):
        open_storage(f"sqlite:///{tmp_path}/x.db?synchronus=off")
    with pytest.raises(ConfigError, match="'fsynk'"):
        open_storage(f"jsonl://{tmp_path}/j?fsynk=true")
    with pytest.raises(ConfigError, match="store 'sqlite' has no option 'zzz'; allowed: "):
        open_storage(f"sqlite:///{tmp_path}/x.db?zzz=1")
    # In code too, from_url points an expiry under Redis's name to SQLite's own.
    with pytest.raises(ConfigError, match="'ttl' \\(did you mean 'retention'\\? this store"):
        SQLiteChatStorage.from_url(f"sqlite:///{tmp_path}/x.db", ttl=30)


def test_memory_from_url() -> None:
    stack = open_storage("memory://?retention=30d&purge_interval=15m")
    store = stack.base
    assert isinstance(store, InMemoryChatStorage)
    assert store.retention == 30 * 86400.0
    assert store.purge_interval == 900.0
    assert store.describe() == "memory:// (retention=30d)"
    with pytest.raises(ConfigError, match="takes no location"):
        open_storage("memory://somewhere")
    with pytest.raises(ConfigError, match="store 'memory' has no option 'x'"):
        open_storage("memory://?x=1")
    plain = open_storage("memory://").base
    assert isinstance(plain, InMemoryChatStorage)
    assert plain.describe() == "memory://"


def test_third_party_factory_without_from_url_gets_the_url_first() -> None:
    got: list[tuple[str, int]] = []

    def factory(url: str, *, n: int = 0) -> InMemoryChatStorage:
        got.append((url, n))
        return InMemoryChatStorage()

    registry = Registry(entry_points=False)
    registry.register("stores", "plain", factory)
    open_storage("plain://h?n=2", registry=registry)
    assert got == [("plain://h?n=2", 2)]

"""Every built-in store the conformance kit (``storage.testing``) runs on: a new backend is one
entry in :data:`HARNESSES` and one ``ConformanceSuite`` subclass in test_conformance.py.

An entry maps a store name to ``(harness_factory, backends)``. ``harness_factory(tmp_path,
request)`` returns a :class:`storage.testing.StoreHarness` over a fresh, empty database of its
own (server stores share one server, isolated by a unique prefix or schema); it may use
``request.getfixturevalue`` to reach a server fixture. ``backends`` lists the anyio backends the
store supports (redis-py and asyncpg are asyncio-only).

:data:`BASES` (``name -> (factory(tmp_path, request) -> store, backends)``) and ``_make`` /
``_scrubbed`` serve test modules that build stores without the kit.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from storage.protocol import ChatStorage
from storage.testing import StoreHarness
from tests.conformance import faults

HarnessFactory = Callable[[Path, pytest.FixtureRequest], StoreHarness]
Factory = Callable[[Path, pytest.FixtureRequest], "ChatStorage | Awaitable[ChatStorage]"]
BOTH = ("asyncio", "trio")
ASYNCIO = ("asyncio",)


def _unique(prefix: str) -> str:
    """A name no other test uses: server stores share one server, isolated by prefix/schema."""
    return f"{prefix}{uuid.uuid4().hex[:16]}"


def _with_query(url: str, **options: str) -> str:
    return url + ("&" if "?" in url else "?") + urlencode(options)


def _memory(tmp: Path, request: pytest.FixtureRequest) -> StoreHarness:
    from storage.stores.memory import InMemoryChatStorage

    return StoreHarness(open=lambda **o: InMemoryChatStorage(**o), url=None, persistent=False)


def _sqlite(tmp: Path, request: pytest.FixtureRequest) -> StoreHarness:
    from storage.stores.sqlite import SQLiteChatStorage

    path = tmp / "chats.db"
    return StoreHarness(
        open=lambda **o: SQLiteChatStorage(path, **o),
        url=f"sqlite:///{path}",
        damage=faults.sqlite_damage(path),
        snapshot=faults.sqlite_snapshot(path),
    )


def _jsonl(tmp: Path, request: pytest.FixtureRequest) -> StoreHarness:
    from storage.stores.jsonl import JsonlChatStorage

    path = tmp / "jsonl"
    return StoreHarness(
        open=lambda **o: JsonlChatStorage(path, **o),
        url=f"jsonl://{path}",
        damage=faults.jsonl_damage(path),
        snapshot=faults.jsonl_snapshot(path),
    )


def _redis(tmp: Path, request: pytest.FixtureRequest) -> StoreHarness:
    from storage.stores.redis import RedisChatStorage

    url = request.getfixturevalue("redis_url")
    prefix = _unique("conf-")
    return StoreHarness(
        open=lambda **o: RedisChatStorage(url, prefix=prefix, **o),
        url=_with_query(url, prefix=prefix),
        damage=faults.redis_damage(url, prefix),
        snapshot=faults.redis_snapshot(url, prefix),
    )


def _redis_cluster(tmp: Path, request: pytest.FixtureRequest) -> StoreHarness:
    from storage.stores.redis import RedisChatStorage

    url = request.getfixturevalue("redis_cluster_url")
    prefix = _unique("conf-")
    return StoreHarness(
        open=lambda **o: RedisChatStorage(url, prefix=prefix, cluster=True, **o),
        url=_with_query(url, prefix=prefix, cluster="true"),
        damage=faults.redis_damage(url, prefix, cluster=True),
        snapshot=faults.redis_snapshot(url, prefix, cluster=True),
    )


def _postgres(tmp: Path, request: pytest.FixtureRequest) -> StoreHarness:
    from storage.stores.postgres import PostgresChatStorage

    dsn = request.getfixturevalue("postgres_dsn")
    schema = _unique("conf_")
    return StoreHarness(
        open=lambda **o: PostgresChatStorage(dsn, schema=schema, **o),
        url=_with_query(dsn, schema=schema),
        damage=faults.postgres_damage(dsn, schema),
        snapshot=faults.postgres_snapshot(dsn, schema),
    )


HARNESSES: dict[str, tuple[HarnessFactory, tuple[str, ...]]] = {
    "memory": (_memory, BOTH),
    "sqlite": (_sqlite, BOTH),
    "jsonl": (_jsonl, BOTH),
    # Real servers from tests/servers.py (redis-py asyncio and asyncpg are asyncio-only).
    "redis": (_redis, ASYNCIO),
    "redis-cluster": (_redis_cluster, ASYNCIO),
    "postgres": (_postgres, ASYNCIO),
}


def _opener(harness_factory: HarnessFactory) -> Factory:
    def factory(tmp: Path, request: pytest.FixtureRequest) -> ChatStorage | Awaitable[ChatStorage]:
        made: Any = harness_factory(tmp, request).open()
        return made  # type: ignore[no-any-return]

    return factory


BASES: dict[str, tuple[Factory, tuple[str, ...]]] = {
    name: (_opener(harness), backends) for name, (harness, backends) in HARNESSES.items()
}


async def _make(factory: Factory, tmp: Path, request: pytest.FixtureRequest) -> ChatStorage:
    made = factory(tmp, request)
    return await made if inspect.isawaitable(made) else made


def _scrubbed(base: Factory) -> Factory:
    async def factory(tmp: Path, request: pytest.FixtureRequest) -> ChatStorage:
        from storage.testing.harness import scrubbed

        return scrubbed(await _make(base, tmp, request))

    return factory

"""Every store and stack the conformance suite runs against: a new backend is one entry here.

An entry maps a stack name to ``(factory, backends)``. ``factory(tmp_path, request)`` returns a
fresh, empty ``ChatStorage`` (or an awaitable of one); it may use ``request.getfixturevalue`` to
reach a server fixture. ``backends`` lists the anyio backends the stack supports (drivers such
as redis-py and asyncpg are asyncio-only).
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from storage.protocol import ChatStorage
from storage.stores.jsonl import JsonlChatStorage
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage

Factory = Callable[[Path, pytest.FixtureRequest], "ChatStorage | Awaitable[ChatStorage]"]
BOTH = ("asyncio", "trio")
ASYNCIO = ("asyncio",)


def _memory(tmp: Path, request: pytest.FixtureRequest) -> ChatStorage:
    return InMemoryChatStorage()


def _sqlite(tmp: Path, request: pytest.FixtureRequest) -> ChatStorage:
    return SQLiteChatStorage(tmp / "chats.db")


def _jsonl(tmp: Path, request: pytest.FixtureRequest) -> ChatStorage:
    return JsonlChatStorage(tmp / "jsonl")


def _unique(prefix: str) -> str:
    """A name no other test uses: server stores share one server, isolated by prefix/schema."""
    return f"{prefix}{uuid.uuid4().hex[:16]}"


def _redis(tmp: Path, request: pytest.FixtureRequest) -> ChatStorage:
    from storage.stores.redis import RedisChatStorage

    return RedisChatStorage(request.getfixturevalue("redis_url"), prefix=_unique("conf-"))


def _redis_cluster(tmp: Path, request: pytest.FixtureRequest) -> ChatStorage:
    from storage.stores.redis import RedisChatStorage

    url = request.getfixturevalue("redis_cluster_url")
    return RedisChatStorage(url, prefix=_unique("conf-"), cluster=True)


def _postgres(tmp: Path, request: pytest.FixtureRequest) -> ChatStorage:
    from storage.stores.postgres import PostgresChatStorage

    return PostgresChatStorage(request.getfixturevalue("postgres_dsn"), schema=_unique("conf_"))


STACKS: dict[str, tuple[Factory, tuple[str, ...]]] = {
    "memory": (_memory, BOTH),
    "sqlite": (_sqlite, BOTH),
    "jsonl": (_jsonl, BOTH),
    # Real servers from tests/servers.py (redis-py asyncio and asyncpg are asyncio-only).
    "redis": (_redis, ASYNCIO),
    "redis-cluster": (_redis_cluster, ASYNCIO),
    "postgres": (_postgres, ASYNCIO),
}


BASES = dict(STACKS)


async def _make(factory: Factory, tmp: Path, request: pytest.FixtureRequest) -> ChatStorage:
    made = factory(tmp, request)
    return await made if inspect.isawaitable(made) else made


def _scrubbed(base: Factory) -> Factory:
    async def factory(tmp: Path, request: pytest.FixtureRequest) -> ChatStorage:
        from storage.layers.transforming import TransformingChatStorage
        from storage.pii import PIIScrubber

        return TransformingChatStorage(await _make(base, tmp, request), PIIScrubber(secret="t"))

    return factory


def _summarized(base: Factory) -> Factory:
    # A threshold above every history of the suite: the conformance rules hold for the
    # delegating path; the active buffer has its own rule tests and reference-model property.
    async def factory(tmp: Path, request: pytest.FixtureRequest) -> ChatStorage:
        from storage.layers.summarizing import SummarizingChatStorage

        return SummarizingChatStorage(await _make(base, tmp, request), trigger_at=500)

    return factory


for _name, (_factory, _backends) in BASES.items():
    STACKS[f"scrub::{_name}"] = (_scrubbed(_factory), _backends)
    STACKS[f"summarize::scrub::{_name}"] = (_summarized(_scrubbed(_factory)), _backends)


def register(name: str, factory: Factory, backends: tuple[str, ...] = BOTH) -> None:
    """Add a stack to the suite (used by store modules' test files and by the layer stacks)."""
    if name in STACKS:
        raise ValueError(f"stack {name!r} registered twice")
    STACKS[name] = (factory, backends)


def params() -> list[Any]:
    """``pytest.param`` entries over (stack, backend)."""
    return [
        pytest.param((name, backend), id=f"{name}-{backend}")
        for name, (_, backends) in STACKS.items()
        for backend in backends
    ]

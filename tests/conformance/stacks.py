"""Every store and stack the conformance suite runs against: a new backend is one entry here.

An entry maps a stack name to ``(factory, backends)``. ``factory(tmp_path, request)`` returns a
fresh, empty ``ChatStorage`` (or an awaitable of one); it may use ``request.getfixturevalue`` to
reach a server fixture. ``backends`` lists the anyio backends the stack supports (drivers such
as redis-py and asyncpg are asyncio-only).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from storage.layers.transforming import TransformingChatStorage
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage

Factory = Callable[[Path, pytest.FixtureRequest], "ChatStorage | Awaitable[ChatStorage]"]
BOTH = ("asyncio", "trio")
ASYNCIO = ("asyncio",)


def upper_transform(message: ChatMessage, key: ChatKey) -> ChatMessage:
    """Identity on content: stacks under test must return what was saved (the scrubber's own
    behaviour is tested in its own module); this exercises the transform path."""
    return message


def _memory(tmp: Path, request: pytest.FixtureRequest) -> ChatStorage:
    return InMemoryChatStorage()


def _sqlite(tmp: Path, request: pytest.FixtureRequest) -> ChatStorage:
    return SQLiteChatStorage(tmp / "chats.db")


STACKS: dict[str, tuple[Factory, tuple[str, ...]]] = {
    "memory": (_memory, BOTH),
    "sqlite": (_sqlite, BOTH),
}


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

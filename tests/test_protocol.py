"""Every layer forwards every protocol method to its inner store; the public API is pinned."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import pytest

import storage
from storage.config import Stack
from storage.layers.summarizing import SummarizingChatStorage
from storage.layers.transforming import TransformingChatStorage
from storage.message import AgentMessage, ChatKey, ChatMessage
from storage.protocol import PROTOCOL_METHODS, ChatStorage, ChatStorageWrapper

pytestmark = pytest.mark.anyio
KEY = ChatKey("u", "s", "a")


class Recorder:
    """An inner store that records which protocol methods were called."""

    def __init__(self) -> None:
        self.called: list[str] = []

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        self.called.append("save")
        return [message]

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        self.called.append("save_messages")
        return list(messages)

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        self.called.append("fetch")
        return []

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[AgentMessage]:
        self.called.append("fetch_all_chats")
        return []

    async def delete(self, key: ChatKey) -> None:
        self.called.append("delete")

    async def delete_user(self, user_id: str) -> None:
        self.called.append("delete_user")

    async def aclose(self) -> None:
        self.called.append("aclose")

    async def __aenter__(self) -> Recorder:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _noop_summarizer(history: list[ChatMessage], keep_last: int) -> list[ChatMessage]:
    return history


LAYERS: dict[str, Any] = {
    "stack": lambda inner: Stack(inner),
    "transforming": lambda inner: TransformingChatStorage(inner, lambda m, k: m),
    "summarizing": lambda inner: SummarizingChatStorage(inner, _noop_summarizer),
}


def layer_classes() -> list[type]:
    """Every ChatStorageWrapper subclass defined in the library (imported modules)."""
    found: list[type] = []
    pending = list(ChatStorageWrapper.__subclasses__())
    while pending:
        cls = pending.pop()
        if cls.__module__.startswith("storage."):
            found.append(cls)
        pending += cls.__subclasses__()
    return found


def test_every_layer_class_is_covered() -> None:
    covered = {type(make(Recorder())) for make in LAYERS.values()}
    assert set(layer_classes()) <= covered


@pytest.mark.parametrize("layer", sorted(LAYERS))
async def test_layer_forwards_every_protocol_method(layer: str) -> None:
    inner = Recorder()
    wrapped = LAYERS[layer](inner)
    assert isinstance(wrapped, ChatStorage)
    await wrapped.save(KEY, ChatMessage("user", "x"))
    await wrapped.save_messages(KEY, [ChatMessage("user", "y")])
    await wrapped.fetch(KEY)
    await wrapped.fetch_all_chats("u", "s")
    await wrapped.delete(KEY)
    await wrapped.delete_user("u")
    await wrapped.aclose()
    assert inner.called == list(PROTOCOL_METHODS)


def test_wrapper_defines_every_protocol_method_itself() -> None:
    for name in PROTOCOL_METHODS:
        assert name in ChatStorageWrapper.__dict__, name
        assert inspect.iscoroutinefunction(getattr(ChatStorageWrapper, name))


EXPORTED = {
    "AgentMessage",
    "ChatKey",
    "ChatMessage",
    "ChatStorage",
    "ChatStorageError",
    "ChatStorageWrapper",
    "ConfigError",
    "CorruptRecordError",
    "InMemoryChatStorage",
    "InvalidKeyError",
    "InvalidMessageError",
    "JsonlChatStorage",
    "PIIScrubber",
    "PostgresChatStorage",
    "RedisChatStorage",
    "SQLiteChatStorage",
    "StorageUnavailableError",
    "SummarizerError",
    "SummarizingChatStorage",
    "SyncChatStorage",
    "ToolCall",
    "TransformingChatStorage",
    "open_storage",
    "validate_history",
}


def test_public_api_is_pinned() -> None:
    assert set(storage.__all__) == EXPORTED


def test_errors_form_one_tree() -> None:
    for name in (
        "ConfigError",
        "CorruptRecordError",
        "InvalidKeyError",
        "InvalidMessageError",
        "StorageUnavailableError",
        "SummarizerError",
    ):
        assert issubclass(getattr(storage, name), storage.ChatStorageError)

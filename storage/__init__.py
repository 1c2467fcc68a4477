"""chatlayers: store, resume and compress the conversation history of LLM agents.

Everything users touch is exported here. Stores, layers and the scrubber are imported on first
use, so ``import storage`` stays light (it never imports litellm, redis or asyncpg).

Example::

    from storage import ChatKey, ChatMessage, open_storage

    async with open_storage("summarize::scrub::sqlite:///chats.db") as stack:
        key = ChatKey("user-1", "session-1", "support")
        await stack.save(key, ChatMessage("user", "My email is ada@example.org"))
        history = await stack.fetch(key, limit=20)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from storage.errors import (
    ChatStorageError,
    ConfigError,
    ConflictError,
    CorruptRecordError,
    InvalidArgumentError,
    InvalidKeyError,
    InvalidMessageError,
    SchemaVersionError,
    StorageUnavailableError,
    SummarizerError,
)
from storage.lazy import lazy_exports
from storage.message import AgentMessage, ChatKey, ChatMessage, ToolCall

if TYPE_CHECKING:
    from storage.config import open_storage
    from storage.history import validate_history
    from storage.layers.encrypting import EncryptingChatStorage
    from storage.layers.summarizing import SummarizingChatStorage
    from storage.layers.transforming import TransformingChatStorage
    from storage.pii import PIIScrubber
    from storage.protocol import ChatStorage, ChatStorageWrapper
    from storage.stores.jsonl import JsonlChatStorage
    from storage.stores.memory import InMemoryChatStorage
    from storage.stores.postgres import PostgresChatStorage
    from storage.stores.redis import RedisChatStorage
    from storage.stores.sqlite import SQLiteChatStorage
    from storage.sync import SyncChatStorage

__all__ = [
    "AgentMessage",
    "ChatKey",
    "ChatMessage",
    "ChatStorage",
    "ChatStorageError",
    "ChatStorageWrapper",
    "ConfigError",
    "ConflictError",
    "CorruptRecordError",
    "EncryptingChatStorage",
    "InMemoryChatStorage",
    "InvalidArgumentError",
    "InvalidKeyError",
    "InvalidMessageError",
    "JsonlChatStorage",
    "PIIScrubber",
    "PostgresChatStorage",
    "RedisChatStorage",
    "SQLiteChatStorage",
    "SchemaVersionError",
    "StorageUnavailableError",
    "SummarizerError",
    "SummarizingChatStorage",
    "SyncChatStorage",
    "ToolCall",
    "TransformingChatStorage",
    "open_storage",
    "validate_history",
]

_LAZY = {
    "ChatStorage": "storage.protocol",
    "ChatStorageWrapper": "storage.protocol",
    "InMemoryChatStorage": "storage.stores.memory",
    "JsonlChatStorage": "storage.stores.jsonl",
    "SQLiteChatStorage": "storage.stores.sqlite",
    "RedisChatStorage": "storage.stores.redis",
    "PostgresChatStorage": "storage.stores.postgres",
    "TransformingChatStorage": "storage.layers.transforming",
    "EncryptingChatStorage": "storage.layers.encrypting",
    "SummarizingChatStorage": "storage.layers.summarizing",
    "PIIScrubber": "storage.pii",
    "SyncChatStorage": "storage.sync",
    "open_storage": "storage.config",
    "validate_history": "storage.history",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)

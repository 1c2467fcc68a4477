"""Drop-in adapters that plug any ``ChatStorage`` stack into the frameworks people already use.

- ``AgentSquadChatStorage(stack)`` — agent-squad's ``ChatStorage`` (extra ``agent-squad``).
- ``OpenAIAgentsSession(stack, key)`` — the OpenAI Agents SDK ``Session`` (extra
  ``openai-agents``).
- ``LangChainChatMessageHistory(stack, key)`` — LangChain's ``BaseChatMessageHistory`` (extra
  ``langchain``).
- ``ChatlayersCheckpointer(stack)`` — a LangGraph checkpointer for LangChain 1.x
  ``create_agent`` (extra ``langgraph``).
- ``LlamaIndexChatStore(stack, user_id=...)`` — LlamaIndex's ``BaseChatStore``, for
  ``ChatMemoryBuffer`` (extra ``llama-index``).
- ``LlamaIndexMemoryStore(stack, user_id=...)`` — the ``chat_store`` of LlamaIndex's
  ``Memory`` (an ``AsyncDBChatStore``; extra ``llama-index``).
- ``PydanticAIHistory(stack, key)`` — pydantic-ai ``message_history`` (extra ``pydantic-ai``).

Nothing here imports a framework until an adapter is used: ``import storage.adapters`` is
free, ``storage.adapters.AgentSquadChatStorage`` imports agent-squad on first access. A missing
framework raises :class:`MissingExtraError` (an ``ImportError`` and a ``ConfigError``) naming
the extra to install.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from storage.errors import ConfigError
from storage.lazy import lazy_exports

if TYPE_CHECKING:
    from storage.adapters.agent_squad import AgentSquadChatStorage
    from storage.adapters.langchain import LangChainChatMessageHistory
    from storage.adapters.langgraph import ChatlayersCheckpointer
    from storage.adapters.llama_index import LlamaIndexChatStore
    from storage.adapters.llama_index_memory import LlamaIndexMemoryStore
    from storage.adapters.openai_agents import OpenAIAgentsSession
    from storage.adapters.pydantic_ai import PydanticAIHistory
    from storage.protocol import ChatStorage
    from storage.sync import SyncChatStorage

__all__ = [
    "AgentSquadChatStorage",
    "ChatlayersCheckpointer",
    "LangChainChatMessageHistory",
    "LlamaIndexChatStore",
    "LlamaIndexMemoryStore",
    "MissingExtraError",
    "OpenAIAgentsSession",
    "PydanticAIHistory",
]

_LAZY: Final = {
    "AgentSquadChatStorage": "storage.adapters.agent_squad",
    "OpenAIAgentsSession": "storage.adapters.openai_agents",
    "LangChainChatMessageHistory": "storage.adapters.langchain",
    "ChatlayersCheckpointer": "storage.adapters.langgraph",
    "LlamaIndexChatStore": "storage.adapters.llama_index",
    "LlamaIndexMemoryStore": "storage.adapters.llama_index_memory",
    "PydanticAIHistory": "storage.adapters.pydantic_ai",
}


# The tool-call id stored for a tool call, or a tool result, that its framework gave no id (a
# chat message needs one): both sides of such a pair get it, so the pair stays a pair.
NO_CALL_ID: Final = "chatlayers-no-call-id"


class MissingExtraError(ImportError, ConfigError):
    """An adapter's framework is not installed; the message names the pip extra.

    Both an ``ImportError`` (what Python code expects from a failed import) and a
    ``ConfigError`` (what chatlayers raises for a missing optional driver).
    """


def missing_extra(framework: str, extra: str, exc: ImportError) -> MissingExtraError:
    """The error for a failed framework import, chained by the caller with ``from exc``."""
    error = MissingExtraError(
        f"this adapter needs {framework}, which could not be imported ({exc}); "
        f"install it with: pip install 'chatlayers[{extra}]'"
    )
    error.name = exc.name
    return error


def split_stack(
    stack: ChatStorage | SyncChatStorage,
) -> tuple[ChatStorage, SyncChatStorage | None]:
    """The async stack an adapter was given, and the sync facade it came in (``None`` when it
    was given the async stack itself)."""
    from storage.sync import SyncChatStorage

    if isinstance(stack, SyncChatStorage):
        return stack.stack, stack
    return stack, None


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)

"""Drop-in adapters that plug any ``ChatStorage`` stack into the frameworks people already use.

- ``AgentSquadChatStorage(stack)`` — agent-squad's ``ChatStorage`` (extra ``agent-squad``).
- ``OpenAIAgentsSession(stack, key)`` — the OpenAI Agents SDK ``Session`` (extra
  ``openai-agents``).
- ``LangChainChatMessageHistory(stack, key)`` — LangChain's ``BaseChatMessageHistory`` (extra
  ``langchain``).

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
    from storage.adapters.openai_agents import OpenAIAgentsSession

__all__ = [
    "AgentSquadChatStorage",
    "LangChainChatMessageHistory",
    "MissingExtraError",
    "OpenAIAgentsSession",
]

_LAZY: Final = {
    "AgentSquadChatStorage": "storage.adapters.agent_squad",
    "OpenAIAgentsSession": "storage.adapters.openai_agents",
    "LangChainChatMessageHistory": "storage.adapters.langchain",
}


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


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)

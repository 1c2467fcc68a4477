"""The ``ChatStorage`` protocol every store and layer implements, and the layer base class.

A stack is an onion: layers wrap an inner ``ChatStorage`` and are ``ChatStorage`` themselves.
``ChatStorageWrapper`` forwards **every** protocol method to ``inner`` explicitly, so a layer
overrides only what it changes and a new method can never bypass a layer silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from storage.abilities import ForwardListing
from storage.message import AgentMessage, ChatKey, ChatMessage

__all__ = ["PROTOCOL_METHODS", "ChatStorage", "ChatStorageWrapper"]


@runtime_checkable
class ChatStorage(Protocol):
    """Async storage of conversations keyed by ``ChatKey(user_id, session_id, agent_id)``.

    Semantics every implementation follows (checked by the conformance suite):

    - ``save``/``save_messages`` return the messages as stored (after inner transforms; a
      dropped message is absent). A batch is atomic: all stored or none. A message whose
      ``id`` is already stored for the key is a no-op and absent from the result.
    - ``fetch`` returns oldest first; ``limit`` keeps at most that many newest messages and the
      window never starts with a ``tool`` result whose call is outside it.
    - ``fetch_all_chats`` merges every agent of the session by ``created_at``, the store's
      sequence breaking ties, as ``AgentMessage(agent_id, message)``.
    - Returned lists are new objects; messages are immutable.

    Errors: ``InvalidMessageError``/``InvalidKeyError`` for bad input (nothing stored),
    ``StorageUnavailableError`` when the backend cannot be reached.
    """

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        """Store one message; return ``[stored]`` or ``[]`` when it was dropped or a retry."""
        ...

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        """Store a batch atomically; return the newly stored messages in order."""
        ...

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        """The conversation, oldest first; at most ``limit`` newest messages when given."""
        ...

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[AgentMessage]:
        """Every agent's raw messages of the session, merged in save order."""
        ...

    async def delete(self, key: ChatKey) -> None:
        """Erase one conversation (a no-op when it does not exist)."""
        ...

    async def delete_user(self, user_id: str) -> None:
        """Erase every conversation of a user (right to erasure)."""
        ...

    async def aclose(self) -> None:
        """Release connections and files; the store is unusable afterwards."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


PROTOCOL_METHODS = (
    "save",
    "save_messages",
    "fetch",
    "fetch_all_chats",
    "delete",
    "delete_user",
    "aclose",
)


class AsyncContextMixin:
    """``async with store:`` closes the store on exit."""

    async def aclose(self) -> None:  # pragma: no cover - overridden everywhere
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class ChatStorageWrapper(ForwardListing, AsyncContextMixin):
    """Base class of every layer: holds ``inner`` and forwards each protocol method to it.

    It forwards listing too (keys are never transformed); every other optional ability
    (``storage.abilities``) a layer must opt into with its ``Forward*`` mixin, so an ability a
    layer does not know can never bypass it.

    Args:
        inner: the store or layer this one wraps.
    """

    inner: ChatStorage

    def __init__(self, inner: ChatStorage) -> None:
        self.inner = inner

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        return await self.inner.save(key, message)

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        return await self.inner.save_messages(key, messages)

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        return await self.inner.fetch(key, limit=limit)

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[AgentMessage]:
        return await self.inner.fetch_all_chats(user_id, session_id)

    async def delete(self, key: ChatKey) -> None:
        await self.inner.delete(key)

    async def delete_user(self, user_id: str) -> None:
        await self.inner.delete_user(user_id)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def describe(self) -> str:
        """This layer alone, in one line, with secrets redacted."""
        return type(self).__name__

"""The ``ChatStorage`` protocol every store and layer implements, and the layer base class.

A stack is an onion: layers wrap an inner ``ChatStorage`` and are ``ChatStorage`` themselves.
``ChatStorageWrapper`` has a forwarder to ``inner`` for **every** protocol and ability method
(made from the protocols' own methods, :mod:`storage.abilities.forwarding`), so a layer
overrides only what it changes; what it does with each optional ability it declares
(:mod:`storage.abilities.declaring`), so a new ability can never bypass a layer silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any, ClassVar, Protocol, Self, runtime_checkable

from storage.abilities import (
    ABILITIES,
    Abilities,
    AbilityForwarders,
    DescribableStorage,
    ListableStorage,
    forward,
)
from storage.abilities.declaring import settle
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


class ChatStorageWrapper(AbilityForwarders, AsyncContextMixin):
    """Base class of every layer: holds ``inner`` and forwards each method to it.

    Every ``ChatStorage`` method is forwarded; so is every ability method, as far as the
    layer's declaration says (``abilities``, checked when a subclass is made: see
    :mod:`storage.abilities.declaring`). This base passes key listing (keys are never
    transformed) and hides every other ability, so a subclass that declares nothing can
    never let an ability it does not know bypass it.

    Args:
        inner: the store or layer this one wraps.
    """

    abilities: ClassVar[Abilities] = Abilities(
        passes=(ListableStorage,),
        transforms=(DescribableStorage,),
        hides=tuple(a for a in ABILITIES if a not in (ListableStorage, DescribableStorage)),
    )
    inner: ChatStorage

    def __init__(self, inner: ChatStorage) -> None:
        self.inner = inner

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        settle(cls)

    save = forward(ChatStorage.save)
    save_messages = forward(ChatStorage.save_messages)
    fetch = forward(ChatStorage.fetch)
    fetch_all_chats = forward(ChatStorage.fetch_all_chats)
    delete = forward(ChatStorage.delete)
    delete_user = forward(ChatStorage.delete_user)
    aclose = forward(ChatStorage.aclose)

    def describe(self) -> str:
        """This layer alone, in one line, with secrets redacted."""
        return type(self).__name__


# The base's own methods stay where they are: a layer's super() reaches the forwarders.
settle(ChatStorageWrapper, install=False)

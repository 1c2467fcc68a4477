"""Rewriting one conversation for adapters whose framework edits history in place.

Frameworks pop the last item (OpenAI Agents), delete one message or replace the whole list
(LlamaIndex). A chatlayers record is append-only, so those become a rewrite of the key: with
:class:`storage.abilities.ReplaceableStorage` (found through every layer of the stack) one
atomic ``replace``; without it, ``delete`` then ``save_messages`` (a crash between the two
loses the conversation, said in each adapter's docstring).
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.abilities import ReplaceableStorage, find_ability
from storage.errors import InvalidMessageError
from storage.history import prepare_batch
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage

__all__ = ["raw_history", "rewrite"]


async def raw_history(stack: ChatStorage, key: ChatKey) -> list[ChatMessage]:
    """The key's stored record (not a summarizing layer's view), oldest first.

    Read through ``fetch_all_chats``, which every layer passes to the record.

    Raises:
        StorageUnavailableError: the backend cannot be reached.
    """
    entries = await stack.fetch_all_chats(key.user_id, key.session_id)
    return [e.message for e in entries if e.agent_id == key.agent_id]


async def rewrite(stack: ChatStorage, key: ChatKey, messages: Sequence[ChatMessage]) -> bool:
    """Make ``messages`` the key's whole record; ``True`` when it was one atomic ``replace``.

    A history ``replace`` refuses (it validates the whole history, ``save`` only each
    message) is rewritten by delete then save, like a stack without ``replace``.

    Raises:
        InvalidMessageError: a message is invalid (nothing changed).
        StorageUnavailableError: the backend cannot be reached.
    """
    replaceable = find_ability(stack, ReplaceableStorage)
    if replaceable is not None:
        try:
            await replaceable.replace(key, list(messages))
            return True
        except InvalidMessageError:
            # ``replace`` checks a whole history (a system message only first); ``save``
            # stores any valid message, so a record some framework wrote (OpenAI Agents
            # items with a developer message mid-way) may not pass: rewrite it the long way.
            pass
    batch = prepare_batch(list(messages))  # refuse bad input before deleting anything
    await stack.delete(key)
    if batch:
        await stack.save_messages(key, batch)
    return False

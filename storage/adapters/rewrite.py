"""Rewriting one conversation for adapters whose framework edits history in place.

Frameworks pop the last item (OpenAI Agents), delete one message or replace the whole list
(LlamaIndex). A chatlayers record is append-only, so those become a rewrite of the key: with
:class:`storage.abilities.ReplaceableStorage` (found through every layer of the stack) one
atomic ``replace``; without it, ``delete`` then ``save_messages`` (a crash between the two
loses the conversation, said in each adapter's docstring).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from storage.abilities import ReplaceableStorage, SequencedStorage, find_ability
from storage.errors import InvalidMessageError
from storage.history import prepare_batch
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage

__all__ = ["insert", "raw_history", "rewrite"]


async def raw_history(stack: ChatStorage, key: ChatKey) -> list[ChatMessage]:
    """The key's stored record (not a summarizing layer's view), in store order.

    Read with ``fetch_since(key, 0)`` (sequence order) when every layer forwards
    :class:`~storage.abilities.SequencedStorage`, else through ``fetch_all_chats`` (every
    layer passes it to the record; ordered by ``created_at``, then sequence).

    Raises:
        StorageUnavailableError: the backend cannot be reached.
    """
    sequenced = find_ability(stack, SequencedStorage)
    if sequenced is not None:
        return list((await sequenced.fetch_since(key, 0)).messages)
    entries = await stack.fetch_all_chats(key.user_id, key.session_id)
    return [e.message for e in entries if e.agent_id == key.agent_id]


def insert(
    record: Sequence[ChatMessage], index: int, messages: Sequence[ChatMessage]
) -> list[ChatMessage]:
    """``record`` with ``messages`` inserted before position ``index``.

    The inserted messages take the ``created_at`` of the message they precede (ties keep the
    store's sequence), so a reader ordering by time sees them where they were put.
    """
    if index >= len(record):
        return [*record, *messages]
    when = record[index].created_at
    placed = [attrs.evolve(m, created_at=when) for m in messages]
    return [*record[:index], *placed, *record[index:]]


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

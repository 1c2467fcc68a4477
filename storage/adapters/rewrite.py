"""Rewriting one conversation for adapters whose framework edits history in place.

Frameworks pop the last item (OpenAI Agents), delete one message or replace the whole list
(LlamaIndex). A chatlayers record is append-only, so those become a rewrite of the key: with
:class:`storage.abilities.ReplaceableStorage` (found through every layer of the stack) one
atomic ``replace``; without it, ``delete`` then ``save_messages`` (a crash between the two
loses the conversation, said in each adapter's docstring).

:func:`edit` makes those rewrites safe next to concurrent appends (another worker, another
process): it reads the record and its version in one snapshot, computes the new record, and
writes it only if the version is still the one read (an append as ``save_messages_if``, a
rewrite as ``replace(..., expected_version=...)``: both compare the version atomically with
the write); otherwise it waits a moment (a random pause, up to twice as long after each
conflict: workers that collided spread out instead of colliding again), reads again and
re-applies the change, up to :data:`EDIT_ATTEMPTS` times, then raises ``ConflictError``. A
change names what it removes by id from the record it was first given, so a retry never
removes a message that landed in between. Only the
delete-then-save fallback (no ``replace`` in the stack, or a history it refuses) checks the
version just before the delete and so still races an append landing in that window.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Final

import anyio
import attrs

from storage.abilities import ReplaceableStorage, SequencedStorage, find_ability
from storage.errors import ConflictError, InvalidMessageError
from storage.history import prepare_batch
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage

__all__ = [
    "EDIT_ATTEMPTS",
    "Change",
    "back_off",
    "edit",
    "insert",
    "pause_bound",
    "raw_history",
    "rewrite",
]

EDIT_ATTEMPTS: Final = 8
_PAUSE: Final = 0.005  # seconds: the longest pause before the second attempt
_PAUSE_MAX: Final = 0.2


def pause_bound(attempt: int) -> float:
    """The longest pause, in seconds, before attempt ``attempt`` (1: the second) of an
    :func:`edit`: 5 ms doubling, at most 200 ms (exponential backoff with full jitter: the
    pause is drawn uniformly below it)."""
    return min(_PAUSE_MAX, _PAUSE * 2.0 ** (attempt - 1))


async def back_off(attempt: int) -> None:
    """Sleep before attempt ``attempt`` (1: the second) of a write that lost a race: a
    random pause below :func:`pause_bound`, so workers that collided part."""
    await anyio.sleep(random.uniform(0, pause_bound(attempt)))


# The new record for the record given, or None for "no change".
Change = Callable[[list[ChatMessage]], list[ChatMessage] | None]


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


async def rewrite(
    stack: ChatStorage,
    key: ChatKey,
    messages: Sequence[ChatMessage],
    *,
    expected_version: str | None = None,
) -> bool:
    """Make ``messages`` the key's whole record; ``True`` when it was one atomic ``replace``.

    With ``expected_version`` (a ``Head.version`` read before), only if the record is still
    at that version: checked by ``replace`` atomically with the write, or, on the long way,
    by a head read just before the delete. A history ``replace`` refuses (it validates the
    whole history, ``save`` only each message) is rewritten by delete then save, like a
    stack without ``replace``.

    Raises:
        ConflictError: the record is not at ``expected_version`` (nothing changed).
        InvalidMessageError: a message is invalid (nothing changed).
        StorageUnavailableError: the backend cannot be reached.
    """
    replaceable = find_ability(stack, ReplaceableStorage)
    if replaceable is not None:
        try:
            await replaceable.replace(key, list(messages), expected_version=expected_version)
            return True
        except InvalidMessageError:
            # ``replace`` checks a whole history (a system message only first); ``save``
            # stores any valid message, so a record some framework wrote (OpenAI Agents
            # items with a developer message mid-way) may not pass: rewrite it the long way.
            pass
    batch = prepare_batch(list(messages))  # refuse bad input before deleting anything
    sequenced = find_ability(stack, SequencedStorage)
    if expected_version is not None and sequenced is not None:
        found = (await sequenced.head(key)).version
        if found != expected_version:
            raise ConflictError(
                f"{key}: version is {found!r}, not {expected_version!r}; nothing changed"
            )
    await stack.delete(key)
    if batch:
        await stack.save_messages(key, batch)
    return False


async def edit(
    stack: ChatStorage, key: ChatKey, change: Change, *, attempts: int = EDIT_ATTEMPTS
) -> list[ChatMessage]:
    """Apply ``change`` to the key's record under a version check; return the record it was
    applied to (the last read).

    ``change(record)`` returns the new whole record, or ``None`` to leave it as it is. When
    the new record only appends to the one read, the new messages are saved with
    ``save_messages_if``; otherwise the record is rewritten (:func:`rewrite`) with
    ``replace(..., expected_version=...)``: both write only while the key is at the version
    read, checked atomically with the write. On a conflict the record is read again and
    ``change`` called again. Without :class:`~storage.abilities.SequencedStorage` in the stack
    there is no version to check and the change is written as computed.

    Raises:
        ConflictError: the record changed ``attempts`` times in a row while it was edited,
            with a pause (:func:`pause_bound`) before each new try (nothing changed by this
            call).
        InvalidMessageError: a message is invalid (nothing changed).
        StorageUnavailableError: the backend cannot be reached.
    """
    sequenced = find_ability(stack, SequencedStorage)
    replaceable = find_ability(stack, ReplaceableStorage)
    for attempt in range(attempts):
        if attempt:
            await back_off(attempt)
        if sequenced is None:
            record, version = await raw_history(stack, key), None
        else:
            tail = await sequenced.fetch_since(key, 0)
            record, version = list(tail.messages), tail.head.version
        new = change(record)
        if new is None:
            return record
        appends = len(new) >= len(record) and new[: len(record)] == record
        if appends:
            added = prepare_batch(new[len(record) :])
            if not added:
                return record
            try:
                if version is not None and replaceable is not None:
                    await replaceable.save_messages_if(key, added, expected_version=version)
                else:
                    await stack.save_messages(key, added)
            except ConflictError:
                continue
            return record
        try:
            await rewrite(stack, key, new, expected_version=version)
        except ConflictError:
            continue
        return record
    raise ConflictError(
        f"{key}: the conversation changed {attempts} times while it was being edited; "
        "nothing was changed"
    )

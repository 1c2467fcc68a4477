"""``fork`` written once, over public abilities: what every base store runs, and what a
layer whose payloads are bound to their key (encryption) runs through itself.

A fork reads the source's timeline (one snapshot), copies the view it stood at with a
conditional save into the empty target (``save_messages_if`` against the empty version:
atomic, refused once anything is there), then carries over a checkpoint that covers exactly
the copied messages up to its ``covers_to``. Run over a layer, every read opens payloads
with the source key and every write seals them with the target's, so nothing bound to the
source key reaches the target.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from storage.abilities.timeline import Timeline
from storage.abilities.values import Head, SummaryCheckpoint
from storage.errors import ConflictError, InvalidArgumentError, InvalidKeyError
from storage.message import ChatKey, ChatMessage

__all__ = ["EMPTY_VERSION", "check_fork", "fork_by_copy", "refuse_split_call"]

EMPTY_VERSION: Final = Head(0, "", 0).version
"""``Head.version`` of a key that holds no message."""

# Older checkpoint versions of the source's epoch tried when its current one covers too much.
_MAX_VERSIONS: Final = 64


def check_fork(key: object, new_key: object, at: object) -> tuple[ChatKey, ChatKey, str | None]:
    """The arguments of ``fork``.

    Raises:
        InvalidKeyError: a key is not a ``ChatKey``.
        InvalidArgumentError: ``new_key`` is ``key`` or of another user; ``at`` is neither
            ``None`` nor a non-empty str.
    """
    for name, value in (("key", key), ("new_key", new_key)):
        if not isinstance(value, ChatKey):
            raise InvalidKeyError(f"fork: {name} must be a ChatKey, got {type(value).__name__}")
    assert isinstance(key, ChatKey)
    assert isinstance(new_key, ChatKey)
    if new_key == key:
        raise InvalidArgumentError(f"fork: new_key is the key itself ({key})")
    if new_key.user_id != key.user_id:
        raise InvalidArgumentError(
            f"fork: {new_key} belongs to another user than {key}; a fork never crosses users "
            "(copy the messages into the other user's conversation instead)"
        )
    if at is not None and (not isinstance(at, str) or not at):
        raise InvalidArgumentError(f"fork: at must be a message id (str) or None, got {at!r}")
    return key, new_key, at


def refuse_split_call(timeline: Timeline, at: str, what: str, key: ChatKey) -> None:
    """Refuse a cut of ``key``'s view right after message ``at`` that separates a tool call
    from its result (:meth:`Timeline.split_call`).

    Raises:
        InvalidArgumentError: naming the call and where to cut instead.
    """
    call = timeline.split_call(at)
    if call is not None:
        raise InvalidArgumentError(
            f"{what}: message {at!r} of {key} is followed by the result of tool call "
            f"{call!r}; a {what} there would leave the call unanswered (no model client "
            "accepts that): choose the call's last result, or the message before the call"
        )


async def fork_by_copy(stack: Any, key: ChatKey, new_key: ChatKey, at: str | None) -> int:
    """Fork ``key`` into ``new_key`` through ``stack``'s public methods (its
    ``fetch_timeline`` and ``save_messages_if``; with ``load_checkpoint``,
    ``save_checkpoint`` and ``fetch_since`` when it has them, the checkpoint too).

    Raises:
        InvalidKeyError, InvalidArgumentError: see :func:`check_fork`; ``at`` is not a
            message of ``key``, or a tool result answering a call at or before it follows
            (:func:`refuse_split_call`).
        ConflictError: ``new_key`` holds messages (nothing copied).
    """
    key, new_key, at = check_fork(key, new_key, at)
    timeline: Timeline = await stack.fetch_timeline(key)
    if at is None:
        copied = timeline.entries()
    else:
        cut = timeline.seq_of(at)
        if cut is None:
            raise InvalidArgumentError(f"fork: no message {at!r} in the record of {key}")
        refuse_split_call(timeline, at, "fork", key)
        copied = timeline.entries(cut)
    messages = [message for _, message in copied]
    try:
        stored: list[ChatMessage] = await stack.save_messages_if(
            new_key, messages, expected_version=EMPTY_VERSION
        )
    except ConflictError:
        raise ConflictError(
            f"fork: {new_key} holds messages; a fork needs an empty conversation (nothing copied)"
        ) from None
    if copied and all(
        callable(getattr(stack, name, None))
        for name in ("load_checkpoint", "save_checkpoint", "fetch_since")
    ):
        await _carry_checkpoint(stack, key, new_key, timeline, copied)
    return len(stored)


async def _carry_checkpoint(
    stack: Any,
    key: ChatKey,
    new_key: ChatKey,
    timeline: Timeline,
    copied: list[tuple[int, ChatMessage]],
) -> None:
    """Carry the newest checkpoint of ``key``'s current epoch that covers exactly the copied
    messages up to its ``covers_to`` (a lost race or none: nothing carried)."""
    found = await _covering(stack, key, timeline, copied)
    if found is None:
        return
    checkpoint, last_id = found
    tail = await stack.fetch_since(new_key, 0)
    seqs = {m.id: seq for seq, m in zip(tail.seqs, tail.messages, strict=True)}
    covers_to = seqs.get(last_id)
    if covers_to is None or not tail.head.epoch:
        return  # the copy changed under us (another writer): nothing to carry
    carried = attrs.evolve(checkpoint, covers_to=covers_to, epoch=tail.head.epoch, version=0)
    await stack.save_checkpoint(new_key, carried, expected_version=tail.head.checkpoint_version)


async def _covering(
    stack: Any, key: ChatKey, timeline: Timeline, copied: list[tuple[int, ChatMessage]]
) -> tuple[SummaryCheckpoint, str] | None:
    """The checkpoint to carry and the id of the last message it covers, or ``None``."""
    epoch = timeline.head.epoch
    now = timeline.entries()
    read = {seq for seq, _ in now}
    checkpoint: SummaryCheckpoint | None = await stack.load_checkpoint(key)
    version = checkpoint.version if checkpoint is not None else 0
    for _ in range(_MAX_VERSIONS):
        if checkpoint is None or checkpoint.epoch != epoch:
            return None  # none, or of an older epoch: every version before it is older still
        covers = checkpoint.covers_to
        # A checkpoint made after the timeline was read covers messages it does not hold.
        had = [m.id for seq, m in now if seq <= covers] if covers in read else []
        if had and had == [m.id for seq, m in copied if seq <= covers]:
            return checkpoint, had[-1]
        version -= 1
        if version <= 0:
            return None
        checkpoint = await stack.load_checkpoint(key, version=version)
    return None

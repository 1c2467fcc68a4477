"""What every base store does to a batch before writing it: validate, timestamp, dedupe."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from storage.errors import InvalidMessageError
from storage.history import validate_message
from storage.message import ChatMessage, _with_created_at

__all__ = ["prepare_batch"]


def prepare_batch(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """Validate every message, set a missing ``created_at`` (one UTC ``now`` per batch) and drop
    repeats of an id within the batch (the first wins).

    Raises:
        InvalidMessageError: any message breaks a rule (its index is named); nothing is stored.
    """
    if type(messages) is not list and (
        isinstance(messages, ChatMessage | str | bytes) or not isinstance(messages, Sequence)
    ):
        raise InvalidMessageError(
            f"save_messages expects a sequence of ChatMessage, got {type(messages).__name__}"
        )
    now: datetime | None = None
    out: list[ChatMessage] = []
    seen: set[str] = set()
    for index, message in enumerate(messages):
        message = validate_message(message, index)
        if message.id in seen:
            continue
        seen.add(message.id)
        if message.created_at is None:
            if now is None:
                now = datetime.now(UTC)
            message = _with_created_at(message, now)
        out.append(message)
    return out

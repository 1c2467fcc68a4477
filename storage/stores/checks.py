"""Argument checks of the optional abilities, shared by every store.

So that ``fetch_since``, ``save_checkpoint``, leases, ``list_sessions``, ``save_record`` and
``purge`` refuse the same inputs with the same errors on every store (the conformance kit,
:mod:`storage.testing`, checks that they do).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import attrs

from storage.abilities import ConversationRecord, SummaryCheckpoint, decode_session_cursor
from storage.errors import InvalidArgumentError, InvalidMessageError
from storage.history import validate_message
from storage.message import MAX_DEPTH, ChatMessage

__all__ = [
    "check_after",
    "check_checkpoint",
    "check_cursor",
    "check_expected_version",
    "check_lease",
    "check_now",
    "check_page_limit",
    "check_record",
]


def check_after(after: object) -> int:
    """``after`` of ``fetch_since``.

    Raises:
        InvalidArgumentError: not an int >= 0 (a bool is refused).
    """
    if type(after) is not int or after < 0:
        raise InvalidArgumentError(f"after must be an int >= 0, got {after!r}")
    return after


def check_expected_version(version: object) -> int:
    """``expected_version`` of ``save_checkpoint``.

    Raises:
        InvalidArgumentError: not an int >= 0.
    """
    if type(version) is not int or version < 0:
        raise InvalidArgumentError(f"expected_version must be an int >= 0, got {version!r}")
    return version


def check_checkpoint(checkpoint: object) -> SummaryCheckpoint:
    """A checkpoint to save, its messages validated (``created_at`` in UTC).

    Raises:
        InvalidArgumentError: not a ``SummaryCheckpoint``, ``covers_to`` not an int >= 1, an
            empty ``epoch``.
        InvalidMessageError: no message, a message breaking a rule, or one not marked as a
            summary (``metadata={"chatlayers": {"summary": True}}``).
    """
    if not isinstance(checkpoint, SummaryCheckpoint):
        raise InvalidArgumentError(f"expected a SummaryCheckpoint, got {type(checkpoint).__name__}")
    if type(checkpoint.covers_to) is not int or checkpoint.covers_to < 1:
        raise InvalidArgumentError(
            f"checkpoint covers_to must be an int >= 1, got {checkpoint.covers_to!r}"
        )
    if not isinstance(checkpoint.epoch, str) or not checkpoint.epoch:
        raise InvalidArgumentError(
            f"checkpoint epoch must be a non-empty str, got {checkpoint.epoch!r}"
        )
    created = checkpoint.created_at
    if not isinstance(created, datetime) or created.tzinfo is None:
        raise InvalidArgumentError("checkpoint created_at must be a timezone-aware datetime")
    if not checkpoint.messages:
        raise InvalidMessageError("a checkpoint needs at least one summary message")
    messages: list[ChatMessage] = []
    for index, message in enumerate(checkpoint.messages):
        message = validate_message(message, index)
        if not message.is_summary:
            raise InvalidMessageError(
                f"checkpoint message {index} is not marked as a summary "
                '(metadata={"chatlayers": {"summary": True}})'
            )
        if message.created_at is None:  # stored messages always carry a time
            message = attrs.evolve(message, created_at=created.astimezone(UTC))
        messages.append(message)
    # attrs' plugin types the tuple converter's argument oddly.
    return attrs.evolve(checkpoint, messages=tuple(messages))


def check_lease(owner: object, ttl: object) -> float:
    """``owner`` and ``ttl`` of ``acquire_lease``; ``ttl`` as a float.

    Raises:
        InvalidArgumentError: ``owner`` not a non-empty str; ``ttl`` not a finite number > 0.
    """
    if not isinstance(owner, str) or not owner:
        raise InvalidArgumentError(f"lease owner must be a non-empty str, got {owner!r}")
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise InvalidArgumentError(f"lease ttl must be seconds > 0, got {ttl!r}")
    if not math.isfinite(ttl) or ttl <= 0:
        raise InvalidArgumentError(f"lease ttl must be seconds > 0, got {ttl!r}")
    return float(ttl)


def check_page_limit(limit: object) -> int:
    """``limit`` of ``list_sessions``.

    Raises:
        InvalidArgumentError: not an int >= 1.
    """
    if type(limit) is not int or limit < 1:
        raise InvalidArgumentError(f"limit must be an int >= 1, got {limit!r}")
    return limit


def check_cursor(cursor: object) -> tuple[int, str, int | None] | None:
    """A ``list_sessions`` cursor decoded (``None`` for the first page).

    Raises:
        InvalidArgumentError: not made by ``encode_session_cursor``.
    """
    if cursor is None:
        return None
    if not isinstance(cursor, str):
        raise InvalidArgumentError(f"malformed session cursor {cursor!r}")
    return decode_session_cursor(cursor)


def check_now(now: object) -> datetime | None:
    """``now`` of ``purge``.

    Raises:
        InvalidArgumentError: not ``None`` or a timezone-aware datetime.
    """
    if now is None:
        return None
    if not isinstance(now, datetime) or now.tzinfo is None:
        raise InvalidArgumentError(f"now must be a timezone-aware datetime, got {now!r}")
    return now


def check_record(record: object) -> ConversationRecord:
    """A record to save.

    Raises:
        InvalidArgumentError: not a ``ConversationRecord``; ``kind`` or ``id`` not a non-empty
            str; a naive ``created_at``; ``data`` not JSON-like (non-string key, another type,
            a lone surrogate, nesting deeper than ``MAX_DEPTH``), the path named.
    """
    if not isinstance(record, ConversationRecord):
        raise InvalidArgumentError(f"expected a ConversationRecord, got {type(record).__name__}")
    if not isinstance(record.kind, str) or not record.kind:
        raise InvalidArgumentError(f"record kind must be a non-empty str, got {record.kind!r}")
    if not isinstance(record.id, str) or not record.id:
        raise InvalidArgumentError(f"record id must be a non-empty str, got {record.id!r}")
    for what, text in (("kind", record.kind), ("id", record.id)):
        _check_text(text, f"record {what}")
    if record.created_at is not None and (
        not isinstance(record.created_at, datetime) or record.created_at.tzinfo is None
    ):
        raise InvalidArgumentError("record created_at must be a timezone-aware datetime")
    _check_data(record.data)
    return record


def _check_text(text: str, where: str) -> None:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgumentError(f"{where} holds a lone surrogate") from None


def _check_data(data: Any) -> None:
    stack: list[tuple[Any, int, str]] = [(data, 1, "data")]
    while stack:
        value, depth, path = stack.pop()
        if isinstance(value, str):
            _check_text(value, f"record {path}")
        elif isinstance(value, Mapping):
            if depth > MAX_DEPTH:
                raise InvalidArgumentError(f"record {path} nests deeper than {MAX_DEPTH} levels")
            for k, v in value.items():
                if not isinstance(k, str):
                    raise InvalidArgumentError(f"record {path} has a non-string key {k!r}")
                _check_text(k, f"a key of record {path}")
                stack.append((v, depth + 1, f"{path}[{k!r}]"))
        elif isinstance(value, Sequence):
            if depth > MAX_DEPTH:
                raise InvalidArgumentError(f"record {path} nests deeper than {MAX_DEPTH} levels")
            stack.extend((v, depth + 1, f"{path}[{i}]") for i, v in enumerate(value))
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise InvalidArgumentError(f"record {path} is {value!r}, which is not JSON data")
        elif not (value is None or isinstance(value, bool | int)):
            raise InvalidArgumentError(
                f"record {path} holds a {type(value).__name__}, which is not JSON data"
            )

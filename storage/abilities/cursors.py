"""Opaque keyset cursors of :meth:`~storage.abilities.SessionListing.list_sessions`, shared
by every store: ``(last_at, session_id)`` of the last session listed."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

from storage.errors import InvalidArgumentError

__all__ = ["decode_session_cursor", "encode_session_cursor"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
# The times a cursor may name: datetime's whole range, in µs since the Unix epoch.
_MIN_US = (datetime.min.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND
_MAX_US = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND


def encode_session_cursor(last_at: datetime, session_id: str) -> str:
    """The opaque cursor after the session ``(last_at, session_id)`` (keyset pagination)."""
    us = (last_at - _EPOCH) // _MICROSECOND  # exact: a float would round some values
    raw = json.dumps([us, session_id], ensure_ascii=True, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode("ascii")).decode("ascii").rstrip("=")


def decode_session_cursor(cursor: str) -> tuple[int, str]:
    """``(last_at in µs since the epoch, session_id)`` of a cursor.

    Only what :func:`encode_session_cursor` can make is accepted: a time within
    ``datetime``'s range and a session id that is a valid key part (non-empty, no NUL, no
    lone surrogate), so a forged cursor can never reach a store's query as an out-of-range
    integer or an unencodable string.

    Raises:
        InvalidArgumentError: the cursor was not made by :func:`encode_session_cursor`.
    """
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        fields = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        if type(fields) is not list or len(fields) != 2:
            raise ValueError("not a pair")
        us, session_id = fields
        if type(us) is not int or not _MIN_US <= us <= _MAX_US:
            raise ValueError("time out of range")
        if type(session_id) is not str or not session_id or "\x00" in session_id:
            raise ValueError("bad session id")
        session_id.encode("utf-8")  # a lone surrogate cannot reach a store
    except (ValueError, TypeError, UnicodeError, RecursionError) as exc:
        raise InvalidArgumentError(f"malformed session cursor {cursor!r}") from exc
    return us, session_id

"""Opaque keyset cursors of :meth:`~storage.abilities.SessionListing.list_sessions`, shared
by every store: ``(position, session_id)`` of the last session listed, and the walk's bound.

The bound is the newest activity the walk's first page saw. Later pages order every session
by its activity up to the bound (a session saved to since then keeps the place it had), so
saves made while a walk pages never move a session past the cursor. A cursor without a bound
(an older release's) pages by the current activity.
"""

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


def encode_session_cursor(last_at: datetime, session_id: str, bound: datetime | None = None) -> str:
    """The opaque cursor after the session ``(last_at, session_id)`` (keyset pagination) of
    a walk bounded by ``bound`` (see the module)."""
    us = (last_at - _EPOCH) // _MICROSECOND  # exact: a float would round some values
    fields: list[object] = [us, session_id]
    if bound is not None:
        fields.append((bound - _EPOCH) // _MICROSECOND)
    raw = json.dumps(fields, ensure_ascii=True, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode("ascii")).decode("ascii").rstrip("=")


def decode_session_cursor(cursor: str) -> tuple[int, str, int | None]:
    """``(position in µs since the epoch, session_id, bound in µs or None)`` of a cursor.

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
        if type(fields) is not list or len(fields) not in (2, 3):
            raise ValueError("not a pair or a triple")
        us, session_id, *rest = fields
        bound = rest[0] if rest else None
        for value in (us, *rest):
            if type(value) is not int or not _MIN_US <= value <= _MAX_US:
                raise ValueError("time out of range")
        if bound is not None and us > bound:
            raise ValueError("a position after the walk's bound")
        if type(session_id) is not str or not session_id or "\x00" in session_id:
            raise ValueError("bad session id")
        session_id.encode("utf-8")  # a lone surrogate cannot reach a store
    except (ValueError, TypeError, UnicodeError, RecursionError) as exc:
        raise InvalidArgumentError(f"malformed session cursor {cursor!r}") from exc
    return us, session_id, bound

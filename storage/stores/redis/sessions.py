"""``list_sessions`` on Redis: keyset pages over the user's session index.

The index (``P:{U}:x``) orders sessions by their newest message time in exact microseconds;
pages are ordered like every store's (``last_at`` in the cursor's microseconds, newest
first, then ``session_id`` ascending, :func:`storage.abilities.encode_session_cursor`). The
two differ by at most a microsecond (the cursor goes through a float), so rows are read in
chunks and a row is placed only once no unread row can sort before it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Final, cast

from storage.abilities import SessionInfo, SessionPage
from storage.codec import decode
from storage.errors import ChatStorageError
from storage.message import ChatKey
from storage.stores.base.sessions import walk_position, walk_rows
from storage.stores.redis import scripts
from storage.stores.redis.context import RedisContext
from storage.stores.redis.layout import decode_part, entries, entry, from_us, known_part, part
from storage.stores.redis.writes import repair_head
from storage.stores.times import to_us

__all__ = ["IndexRow", "cursor_us", "list_sessions", "page_sessions", "session_info"]

# A row may sort up to this many µs away from its index score (float rounding).
_SLACK: Final = 2

# (cursor µs, session_id, encoded member, index score µs)
IndexRow = tuple[int, str, str, int]
ReadChunk = Callable[[int, int, int], Awaitable[list[tuple[bytes, float]]]]
ReadInfos = Callable[[Sequence[str]], Awaitable[list[SessionInfo | None]]]


def cursor_us(moment: datetime) -> int:
    """``moment`` in the microseconds a session cursor holds (exact, as on every store)."""
    return to_us(moment)


def session_info(member: str, reply: list[object]) -> SessionInfo | None:
    """A session's info from the ``SESSION_INFO`` script's reply (``None``: no message).

    ``last_at`` is the session's last activity (its ``t``, never lowered by deletes) or its
    newest message, whichever is later. Fields are numbers the scripts wrote: one that is not
    (a damaged head, skipped by the script) never raises here.

    Raises:
        ValueError: an agent or the session id is not an encoded key part.
    """
    rows = reply[2]
    assert isinstance(rows, list)
    agents: list[str] = []
    count = 0
    first: int | None = None
    last: int | None = None
    for n in range(0, len(rows), 4):
        messages = int(rows[n + 1])
        if messages <= 0:
            continue
        agents.append(decode_part(rows[n]))
        count += messages
        f, t = int(rows[n + 2]), int(rows[n + 3])
        first = f if first is None else min(first, f)
        last = t if last is None else max(last, t)
    if not count or first is None or last is None:
        return None
    active = _number(reply[1])
    if active is not None and active > last:
        last = active
    return SessionInfo(
        decode_part(member), tuple(sorted(agents)), count, from_us(first), from_us(last)
    )


def broken_agents(reply: list[object]) -> list[bytes]:
    """The encoded agents of a ``SESSION_INFO`` reply whose head must be rebuilt."""
    rows = reply[3] if len(reply) > 3 else []
    assert isinstance(rows, list)
    return [agent for agent in rows if isinstance(agent, bytes)]


def _number(raw: object) -> int | None:
    try:
        return int(raw)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None


async def page_sessions(
    read_chunk: ReadChunk,
    read_infos: ReadInfos,
    limit: int,
    after: tuple[int, str] | None,
    unusable: Callable[[bytes], None] | None = None,
) -> list[tuple[int, SessionInfo]]:
    """The first ``limit + 1`` sessions after the cursor, each with its index time.

    Args:
        read_chunk: ``(max_score, offset, count)`` -> index rows ``(member, score)`` with
            score <= max_score, highest first.
        read_infos: the infos of some members (``None`` for a session holding no message).
        limit: the page size (>= 1).
        after: the decoded cursor, or ``None`` for the first page.
        unusable: told of an index member that is not an encoded session id (skipped).
    """
    max_score = after[0] + _SLACK if after is not None else 2**62
    chunk = max(4 * (limit + 1), 64)
    offset = 0
    exhausted = False
    lowest = max_score
    pending: list[IndexRow] = []
    found: list[tuple[IndexRow, SessionInfo]] = []
    while len(found) <= limit:
        ready = exhausted or (pending and pending[0][0] > lowest + _SLACK)
        if not ready:
            rows = await read_chunk(max_score, offset, chunk)
            offset += len(rows)
            exhausted = len(rows) < chunk
            for raw, score in rows:
                exact = int(score)
                lowest = min(lowest, exact)
                try:
                    member = raw.decode("ascii")
                    row = (cursor_us(from_us(exact)), decode_part(member), member, exact)
                except (ValueError, OverflowError):  # not a member this store wrote
                    if unusable is not None:
                        unusable(raw)
                    continue
                if after is None or (-row[0], row[1]) > (-after[0], after[1]):
                    pending.append(row)
            pending.sort(key=lambda r: (-r[0], r[1]))
            continue
        if not pending:
            break
        take: list[IndexRow] = []
        while pending and len(take) < limit + 1 - len(found):
            if not exhausted and pending[0][0] <= lowest + _SLACK:
                break
            take.append(pending.pop(0))
        if not take:
            continue
        infos = await read_infos([row[2] for row in take])
        found += [(row, info) for row, info in zip(take, infos, strict=True) if info is not None]
    # The index's time, not the info's: they differ only after a crash between a write and
    # its index update, and the cursor must follow the order pages are read in.
    return [(row[3], info) for row, info in found]


async def list_sessions(
    ctx: RedisContext,
    user_id: str,
    limit: int,
    after: tuple[int, str] | None,
    bound: int | None,
) -> SessionPage:
    """A page of the user's sessions, read from the user's index and each listed session's
    heads: the cost grows with the page, not with the messages. A session whose messages lie
    under a lost head has it rebuilt first. A walk's later pages also read the sessions saved
    to since its first page (index time past the bound) and place each by its messages'
    times up to the bound (:mod:`storage.stores.base.sessions`): only their lists are read."""
    x, _ = ctx.layout.index(user_id)
    user = part("user_id", user_id)

    async def read_chunk(max_score: int, offset: int, count: int) -> list[tuple[bytes, float]]:
        client = await ctx.redis.ready()
        rows = await client.zrevrangebyscore(
            x, max_score, "-inf", start=offset, num=count, withscores=True
        )
        return cast(list[tuple[bytes, float]], rows)

    async def read_infos(members: Sequence[str]) -> list[SessionInfo | None]:
        calls = []
        for member in members:
            base = ctx.layout.base(user, member)
            calls.append(([f"{base}a", f"{base}s"], [base]))
        replies = await ctx.redis.eval_many(scripts.SESSION_INFO, calls)
        infos: list[SessionInfo | None] = []
        for member, reply, call in zip(members, replies, calls, strict=True):
            broken = broken_agents(reply)
            if broken:  # messages under a lost head: rebuild it, then read again
                session_id = decode_part(member)
                for agent in broken:
                    agent_id = known_part(agent)
                    if agent_id is not None:
                        repaired = ChatKey(user_id, session_id, agent_id)
                        ctx.unusable("head", repaired, "lost or unreadable")
                        await repair_head(ctx, repaired)
                reply = await ctx.redis.eval(scripts.SESSION_INFO, *call)
            try:
                infos.append(session_info(member, reply))
            except ValueError as exc:  # an agent this store did not write
                ctx.unusable("session agents", f"session {member!r}", exc)
                infos.append(None)
        return infos

    def unusable(raw: bytes) -> None:
        ctx.unusable("session index", f"user {user_id!r}", f"member {raw!r}")

    stable = await page_sessions(read_chunk, read_infos, limit, after, unusable)
    moved = await _moved(ctx, user, x, bound, read_infos) if bound is not None else []
    return walk_rows(stable, moved, limit, after, bound)


async def _moved(
    ctx: RedisContext, user: str, x: str, bound: int, read_infos: ReadInfos
) -> list[tuple[int, SessionInfo]]:
    """``(walk position, info)`` of the sessions saved to since the walk's first page."""
    client = await ctx.redis.ready()
    rows = cast(
        list[tuple[bytes, float]],
        await client.zrangebyscore(x, bound - _SLACK, "+inf", withscores=True),
    )
    members = [raw.decode("ascii") for raw, score in rows if int(score) > bound]
    moved = []
    for member, info in zip(members, await read_infos(members), strict=True):
        if info is not None:
            times = await _times(ctx, user, member)
            moved.append((walk_position(times, bound, cursor_us(info.first_at)), info))
    return moved


async def _times(ctx: RedisContext, user: str, member: str) -> list[int]:
    """Every message time of a session (µs): where a session saved to during a listing walk
    stood when the walk began (its remembered activity is not in them: see the docs)."""
    client = await ctx.redis.ready()
    base = ctx.layout.base(user, member)
    times: list[int] = []
    agents = cast(set[bytes], await client.smembers(f"{base}a"))
    for agent in agents:
        name = f"{base}m:{agent.decode('ascii')}"
        joined = await ctx.redis.eval(scripts.FETCH, [name], [0])
        for raw in entries(joined):
            try:
                at = decode(entry(raw)[1]).created_at
            except ChatStorageError:  # the raw record's own damage: its time unknown
                continue
            if at is not None:
                times.append(cursor_us(at))
    return times

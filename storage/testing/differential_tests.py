"""The differential test of the conformance kit: a stack against the same layering over the
reference store (``storage.stores.memory.InMemoryChatStorage``), on a long deterministic
sequence of mixed operations; every result must match."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs

from storage.abilities import (
    ConversationRecord,
    RecordStorage,
    ReplaceableStorage,
    SequencedStorage,
    SessionListing,
    find_ability,
)
from storage.errors import ConflictError
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage
from storage.testing.harness import LAYERINGS

__all__ = ["DifferentialTests", "Operation", "operations"]

USERS = ("u", "u:*", "u%3A%2A")  # the last is the first's escaped form: must stay apart
SESSIONS = ("s", "s{1}", "s/2")
AGENTS = ("a", "a?[b]")
T0 = datetime(2024, 5, 1, tzinfo=UTC)
KINDS: tuple[str, ...] = ("save", "save", "save", "fetch", "all", "delete", "delete_user")
KINDS += ("replace", "if", "sessions", "record")


@attrs.frozen
class Operation:
    """One step: what to do, on which key, with which messages (drawn once for both sides)."""

    kind: str
    key: ChatKey
    messages: tuple[ChatMessage, ...] = ()
    more: tuple[ChatMessage, ...] = ()
    limit: int | None = None
    record: ConversationRecord | None = None


def operations(seed: int, count: int) -> list[Operation]:
    """``count`` operations from ``seed``: saves with repeated ids and caller timestamps,
    windows, merged views, deletes, replaces, conditional saves (half of them stale),
    session listings and records."""
    rng = random.Random(seed)
    n = 0

    def batch(size: int) -> tuple[ChatMessage, ...]:
        nonlocal n
        out = []
        for _ in range(size):
            n += 1
            mid = f"id{rng.randrange(40)}" if rng.random() < 0.3 else f"n{n}"
            role = rng.choice(("user", "assistant"))
            at = T0 + timedelta(seconds=n // 2)  # pairs share a time: ties by sequence
            out.append(ChatMessage(role, f"text {n} word{n % 5}", id=mid, created_at=at))
        return tuple(out)

    ops = []
    for _ in range(count):
        kind = rng.choice(KINDS)
        key = ChatKey(rng.choice(USERS), rng.choice(SESSIONS), rng.choice(AGENTS))
        stale = batch(1) if kind == "if" and rng.random() < 0.5 else ()
        ops.append(
            Operation(
                kind,
                key,
                batch(rng.randrange(0, 4)),
                stale,
                rng.choice((None, 1, 2, 5)),
                ConversationRecord("note", {"n": n % 7}, id=f"r{rng.randrange(9)}"),
            )
        )
    return ops


def _shape(value: Any) -> Any:
    """What must match between two stores: ids, roles, texts and times (not sequences)."""
    if isinstance(value, ChatMessage):
        return ("m", value.id, value.role, value.text, value.created_at)
    if isinstance(value, list | tuple):
        return [_shape(v) for v in value]
    return value


async def apply(stack: ChatStorage, op: Operation) -> Any:
    """Run ``op`` on ``stack``; the comparable result (``None`` when it lacks the ability)."""
    key = op.key
    if op.kind == "save":
        return _shape(await stack.save_messages(key, op.messages))
    if op.kind == "fetch":
        return _shape(await stack.fetch(key, limit=op.limit))
    if op.kind == "all":
        merged = await stack.fetch_all_chats(key.user_id, key.session_id)
        return [(m.agent_id, _shape(m.message)) for m in merged]
    if op.kind == "delete":
        return await stack.delete(key)
    if op.kind == "delete_user":
        return await stack.delete_user(key.user_id)
    return await _ABILITY_OPS.get(op.kind, _record)(stack, op)


async def _replace(stack: ChatStorage, op: Operation) -> Any:
    rep = find_ability(stack, ReplaceableStorage)
    return None if rep is None else _shape(await rep.replace(op.key, op.messages[:2]))


async def _save_if(stack: ChatStorage, op: Operation) -> Any:
    rep = find_ability(stack, ReplaceableStorage)
    seq = find_ability(stack, SequencedStorage)
    if rep is None or seq is None:
        return None
    version = (await seq.head(op.key)).version
    if op.more:
        await stack.save_messages(op.key, op.more)
    try:
        return _shape(await rep.save_messages_if(op.key, op.messages, expected_version=version))
    except ConflictError:
        return "conflict"


async def _sessions(stack: ChatStorage, op: Operation) -> Any:
    lister = find_ability(stack, SessionListing)
    if lister is None:
        return None
    page = await lister.list_sessions(op.key.user_id, limit=50)
    return [(s.session_id, s.agents, s.message_count, s.first_at, s.last_at) for s in page.sessions]


async def _record(stack: ChatStorage, op: Operation) -> Any:
    recs = find_ability(stack, RecordStorage)
    if recs is None or op.record is None:
        return None
    await recs.save_record(op.key, op.record)
    return [(r.id, r.kind, dict(r.data)) for r in await recs.fetch_records(op.key)]


# The operations that need an optional ability, by kind (any other kind saves a record).
_ABILITY_OPS: dict[str, Callable[[ChatStorage, Operation], Awaitable[Any]]] = {
    "replace": _replace,
    "if": _save_if,
    "sessions": _sessions,
    "record": _record,
}


class DifferentialTests:
    """The stack behaves exactly like the reference store under the same operations."""

    async def test_same_as_the_reference_store(self, store: ChatStorage, layering: str) -> None:
        from storage.stores.memory import InMemoryChatStorage

        reference = LAYERINGS[layering](InMemoryChatStorage())
        for step, op in enumerate(operations(seed=11, count=150)):
            expected = await apply(reference, op)
            got = await apply(store, op)
            assert got == expected, f"step {step} {op.kind} {op.key}: {got!r} != {expected!r}"

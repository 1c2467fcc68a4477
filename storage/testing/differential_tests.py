"""The differential test of the conformance kit: a stack against the same layering over the
reference store (``storage.stores.memory.InMemoryChatStorage``), on a long deterministic
sequence of mixed operations; every result must match."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from storage.abilities import (
    RecordStorage,
    ReplaceableStorage,
    SequencedStorage,
    SessionListing,
    find_ability,
)
from storage.abilities import ConversationRecord
from storage.errors import ConflictError
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage
from storage.testing.harness import LAYERINGS

__all__ = ["DifferentialTests"]

USERS = ("u", "u:*", "u%3A%2A")
SESSIONS = ("s", "s{1}", "s/2")
AGENTS = ("a", "a?[b]")
T0 = datetime(2024, 5, 1, tzinfo=UTC)


def _shape(value: Any) -> Any:
    """What must match between two stores: ids, roles, texts and times (not sequences)."""
    if isinstance(value, ChatMessage):
        return ("m", value.id, value.role, value.text, value.created_at)
    if isinstance(value, list | tuple):
        return [_shape(v) for v in value]
    return value


class DifferentialTests:
    """The stack behaves exactly like the reference store under the same operations."""

    async def test_same_as_the_reference_store(self, store: ChatStorage, layering: str) -> None:
        from storage.stores.memory import InMemoryChatStorage

        reference = LAYERINGS[layering](InMemoryChatStorage())
        rng = random.Random(11)
        sides = (reference, store)
        counter = 0

        def key() -> ChatKey:
            return ChatKey(rng.choice(USERS), rng.choice(SESSIONS), rng.choice(AGENTS))

        def batch(size: int) -> list[ChatMessage]:
            nonlocal counter
            out = []
            for _ in range(size):
                counter += 1
                mid = f"id{rng.randrange(40)}" if rng.random() < 0.3 else f"n{counter}"
                role = rng.choice(("user", "assistant"))
                at = T0 + timedelta(seconds=counter)
                out.append(ChatMessage(role, f"text {counter} word{counter % 5}", id=mid, created_at=at))
            return out

        for step in range(150):
            op = rng.choice(
                ("save", "save", "save", "fetch", "all", "delete", "delete_user", "replace", "if", "sessions", "record")
            )
            k = key()
            results: list[Any] = []
            for side in sides:
                rep = find_ability(side, ReplaceableStorage)
                seq = find_ability(side, SequencedStorage)
                lister = find_ability(side, SessionListing)
                recs = find_ability(side, RecordStorage)
                state = rng.getstate()  # both sides draw the same values
                if op == "save":
                    got: Any = await side.save_messages(k, batch(rng.randrange(0, 4)))
                elif op == "fetch":
                    got = await side.fetch(k, limit=rng.choice((None, 1, 2, 5)))
                elif op == "all":
                    got = [(m.agent_id, _shape(m.message)) for m in await side.fetch_all_chats(k.user_id, k.session_id)]
                elif op == "delete":
                    got = await side.delete(k)
                elif op == "delete_user":
                    got = await side.delete_user(k.user_id)
                elif op == "replace":
                    got = None if rep is None else await rep.replace(k, batch(rng.randrange(0, 3)))
                elif op == "if":
                    if rep is None or seq is None:
                        got = None
                    else:
                        version = (await seq.head(k)).version
                        stale = rng.random() < 0.5
                        if stale:
                            await side.save_messages(k, batch(1))
                        try:
                            got = await rep.save_messages_if(k, batch(2), expected_version=version)
                        except ConflictError:
                            got = "conflict"
                elif op == "sessions":
                    got = None
                    if lister is not None:
                        page = await lister.list_sessions(k.user_id, limit=50)
                        got = [(s.session_id, s.agents, s.message_count, s.first_at, s.last_at) for s in page.sessions]
                else:
                    got = None
                    if recs is not None:
                        counter += 1
                        record = ConversationRecord("note", {"n": counter % 7}, id=f"r{counter % 9}")
                        stored = await recs.save_record(k, record)
                        got = [(r.id, r.kind, dict(r.data)) for r in await recs.fetch_records(k)]
                        assert stored.id == record.id
                if side is reference:
                    rng_after, counter_after = rng.getstate(), counter
                    rng.setstate(state)
                    counter -= 0
                results.append(_shape(got))
            assert results[0] == results[1], f"step {step} {op} {k}: {results[1]!r} != reference {results[0]!r}"
            del rng_after, counter_after

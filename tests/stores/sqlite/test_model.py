"""SQLite store against the reference (the memory store), operation by operation.

Random mixes of saves (new and retried), replaces, conditional saves, deletes, user
erasure, records, checkpoints, leases, clock moves and retention purges run on both stores;
after every step every read of every ability agrees: messages, windows, keys, heads (epoch
changes included), sessions pages, records, checkpoints and search results.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.abilities import ConversationRecord, SummaryCheckpoint
from storage.errors import ConflictError
from storage.message import ChatKey, ChatMessage
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage

T0 = datetime(2025, 6, 1, tzinfo=UTC)
KEYS = [ChatKey("u0", "s0", "a"), ChatKey("u0", "s0", "b"), ChatKey("u0", "s1", "a")]
KEYS += [ChatKey("u1", "s0", "a")]
WORDS = ["parcel", "refund", "flight", "seat", "baggage"]
AGES = [timedelta(0), timedelta(hours=5), timedelta(days=2), timedelta(days=9)]


class Clock:
    def __init__(self) -> None:
        self.now = T0.timestamp()

    def __call__(self) -> float:
        return self.now


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("save"), st.integers(0, 3), st.integers(1, 4), st.integers(0, 3)),
        st.tuples(st.just("retry"), st.integers(0, 3), st.just(0), st.just(0)),
        st.tuples(st.just("replace"), st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
        st.tuples(st.just("save_if"), st.integers(0, 3), st.integers(0, 1), st.just(0)),
        st.tuples(st.just("delete"), st.integers(0, 3), st.just(0), st.just(0)),
        st.tuples(st.just("delete_user"), st.integers(0, 1), st.just(0), st.just(0)),
        st.tuples(st.just("record"), st.integers(0, 3), st.integers(0, 2), st.just(0)),
        st.tuples(st.just("checkpoint"), st.integers(0, 3), st.integers(0, 1), st.just(0)),
        st.tuples(st.just("lease"), st.integers(0, 3), st.integers(0, 1), st.just(0)),
        st.tuples(st.just("tick"), st.just(0), st.integers(1, 3), st.just(0)),
        st.tuples(st.just("purge"), st.just(0), st.integers(0, 3), st.just(0)),
    ),
    max_size=25,
)


async def sessions(store: Any, user: str) -> list[Any]:
    out: list[Any] = []
    cursor = None
    while True:
        page = await store.list_sessions(user, limit=2, cursor=cursor)
        out += page.sessions
        cursor = page.next_cursor
        if cursor is None:
            return out


async def snapshot(store: Any) -> dict[str, Any]:
    heads = {k: await store.head(k) for k in KEYS}
    state: dict[str, Any] = {
        "keys": await store.list_keys(),
        "heads": {
            k: (h.last_seq > 0, bool(h.epoch), h.checkpoint_version) for k, h in heads.items()
        },
        "sessions": {u: await sessions(store, u) for u in ("u0", "u1")},
    }
    for k in KEYS:
        state[f"fetch {k}"] = await store.fetch(k)
        state[f"last3 {k}"] = await store.fetch(k, limit=3)
        state[f"records {k}"] = [
            (r.kind, r.data, r.id, r.created_at) for r in await store.fetch_records(k)
        ]
        cp = await store.load_checkpoint(k)
        state[f"checkpoint {k}"] = None if cp is None else (cp.messages, cp.version)
    for word in WORDS[:3]:
        state[f"search {word}"] = {h.message.id for h in await store.search("u0", word)}
    return state


class Mix:
    """Runs each operation on both stores: one method an operation of :data:`OPS`, named as
    it, returning what each store returned (to compare; ``[]``: nothing to compare)."""

    def __init__(self, stores: tuple[Any, ...], clock: Clock) -> None:
        self.stores, self.clock = stores, clock
        self.saved: list[ChatMessage] = []
        self.n = 0

    def batch(self, count: int, age: int) -> list[ChatMessage]:
        out: list[ChatMessage] = []
        for _ in range(count):
            self.n += 1
            n = self.n
            text = f"{WORDS[n % len(WORDS)]} number {n} {WORDS[(n * 3) % len(WORDS)]}"
            out.append(ChatMessage("user", text, created_at=T0 - AGES[age]))
        self.saved.extend(out)
        return out

    async def apply(self, step: int, op: str, k: int, a: int, b: int) -> list[Any]:
        return await getattr(self, op)(step, KEYS[k], k, a, b)  # type: ignore[no-any-return]

    async def save(self, step: int, key: ChatKey, k: int, a: int, b: int) -> list[Any]:
        messages = self.batch(a, b)
        return [await s.save_messages(key, messages) for s in self.stores]

    async def retry(self, step: int, key: ChatKey, k: int, a: int, b: int) -> list[Any]:
        again = self.saved[-3:]
        return [await s.save_messages(key, again) for s in self.stores] if again else []

    async def replace(self, step: int, key: ChatKey, k: int, a: int, b: int) -> list[Any]:
        messages = self.batch(a, b)
        return [await s.replace(key, messages) for s in self.stores]

    async def delete(self, step: int, key: ChatKey, k: int, a: int, b: int) -> list[Any]:
        for s in self.stores:
            await s.delete(key)
        return []

    async def delete_user(self, step: int, key: ChatKey, k: int, a: int, b: int) -> list[Any]:
        for s in self.stores:
            await s.delete_user(f"u{k}")
        return []

    async def record(self, step: int, key: ChatKey, k: int, a: int, b: int) -> list[Any]:
        record = ConversationRecord("kind", {"step": step, "k": [a]}, id=f"r{step}")
        stored = [await s.save_record(key, record) for s in self.stores]
        return [(r.kind, r.data, r.id, r.created_at) for r in stored]

    async def lease(self, step: int, key: ChatKey, k: int, a: int, b: int) -> list[Any]:
        return [await s.acquire_lease(key, f"owner{a}", 60) for s in self.stores]

    async def tick(self, step: int, key: ChatKey, k: int, a: int, b: int) -> list[Any]:
        self.clock.now += 40 * a
        return []

    async def purge(self, step: int, key: ChatKey, k: int, a: int, b: int) -> list[Any]:
        now = T0 + timedelta(days=a)
        return [await s.purge(now=now) for s in self.stores]

    async def save_if(self, step: int, key: ChatKey, k: int, a: int, b: int) -> list[Any]:
        messages = self.batch(1, 0)
        results: list[Any] = []
        for s in self.stores:
            version = (await s.head(key)).version if a else "stale.0"
            try:
                results.append(await s.save_messages_if(key, messages, expected_version=version))
            except ConflictError:
                results.append("conflict")
        return results

    async def checkpoint(self, step: int, key: ChatKey, k: int, a: int, b: int) -> list[Any]:
        return [await self._checkpoint(s, key, step, newest=bool(a)) for s in self.stores]

    @staticmethod
    async def _checkpoint(s: Any, key: ChatKey, step: int, *, newest: bool) -> Any:
        tail = await s.fetch_since(key, 0)
        if not tail.seqs:
            return None
        summary = ChatMessage(
            "system",
            f"summary {step}",
            id=f"cp{step}",
            created_at=T0,
            metadata={"chatlayers": {"summary": True}},
        )
        covers = tail.seqs[-1] if newest else tail.seqs[0]
        cp = SummaryCheckpoint((summary,), covers, tail.head.epoch, "m", T0)
        won = await s.save_checkpoint(key, cp, expected_version=tail.head.checkpoint_version)
        return None if won is None else won.version


async def epoch_changes(stores: tuple[Any, ...], epochs: list[dict[ChatKey, str]]) -> list[Any]:
    """The keys whose epoch changed since ``epochs`` (updated), per store."""
    changed = []
    for i, s in enumerate(stores):
        current = {k: (await s.head(k)).epoch for k in KEYS}
        changed.append({k for k in KEYS if current[k] != epochs[i][k]})
        epochs[i] = current
    return changed


@settings(
    max_examples=35, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_sqlite_agrees_with_the_reference(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int, int]]
) -> None:
    clock = Clock()
    options: dict[str, Any] = {"retention": "3d", "purge_interval": 10**9, "clock": clock}
    model = InMemoryChatStorage(**options)
    store = SQLiteChatStorage(tmp_path_factory.mktemp("db") / "chats.db", **options)
    stores: tuple[Any, ...] = (model, store)
    mix = Mix(stores, clock)
    epochs: list[dict[ChatKey, str]] = [dict.fromkeys(KEYS, ""), dict.fromkeys(KEYS, "")]
    try:
        for step, (op, k, a, b) in enumerate(ops):
            results = await mix.apply(step, op, k, a, b)
            if results:
                assert results[0] == results[1], (step, op)
            states = [await snapshot(s) for s in stores]
            assert states[0] == states[1], (step, op)
            # An epoch changes exactly when the reference's does.
            changed = await epoch_changes(stores, epochs)
            assert changed[0] == changed[1], (step, op)
    finally:
        await store.aclose()
        await model.aclose()

"""PostgreSQL payload column (``text`` vs ``jsonb``) and the store's own read/write paths.

Part 1: the same rows (real messages from ``examples/data``, encoded by ``storage.codec``) in
two tables that differ only in the record column's type; each fetch is the store's query plus
decoding. Decides ``PostgresChatStorage``'s payload type.

Part 2: ``PostgresChatStorage`` itself on a key of 1,000 messages: a save (one call of the
server-side write function, which numbers the batch under the key's row lock) against the
single ``INSERT`` of schema version 1 (a ``bigserial``, no lock, no summaries), and the reads
a coherent summarizing layer makes: ``head`` and an empty ``fetch_since`` against
``fetch(limit=1)``. Prints the median of many runs per case.

    python -m benchmarks.postgres_payload [DSN]

Without a DSN it starts a throw-away PostgreSQL (``tests/servers.py``; needs initdb/pg_ctl).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from storage.codec import decode, encode  # noqa: E402
from storage.message import ChatMessage  # noqa: E402

CASES = (
    ("10 messages", 10, None),
    ("1,000 messages", 1000, None),
    ("newest 20 of 10,000", 10000, 20),
)


def corpus() -> list[ChatMessage]:
    out: list[ChatMessage] = []
    for path in sorted((ROOT / "examples" / "data").glob("*.openai.jsonl")):
        for line in path.read_text().splitlines():
            for raw in json.loads(line)["messages"]:
                if raw["role"] != "system":
                    out.append(ChatMessage.from_openai(raw))
    return out


async def fill(
    conn: asyncpg.Connection, table: str, kind: str, n: int, pool: list[ChatMessage]
) -> None:
    await conn.execute(f"DROP TABLE IF EXISTS {table}")
    await conn.execute(
        f"CREATE TABLE {table} (seq bigserial PRIMARY KEY, user_id text, session_id text, "
        f"agent_id text, message_id text, created_at timestamptz, record {kind})"
    )
    await conn.execute(f"CREATE INDEX ON {table} (user_id, session_id, agent_id, seq)")
    start = datetime(2024, 1, 1, tzinfo=UTC)
    rows = []
    for i in range(n):
        m = pool[i % len(pool)]
        m = ChatMessage(
            m.role,
            m.content,
            m.tool_calls,
            m.tool_call_id,
            m.name,
            created_at=start + timedelta(seconds=i),
        )
        rows.append(("u", "s", "a", m.id, m.created_at, encode(m)))
    await conn.copy_records_to_table(
        table,
        records=rows,
        columns=["user_id", "session_id", "agent_id", "message_id", "created_at", "record"],
    )
    await conn.execute(f"VACUUM ANALYZE {table}")


async def timed(conn: asyncpg.Connection, sql: str, args: tuple[object, ...]) -> float:
    t0 = time.perf_counter()
    rows = await conn.fetch(sql, *args)
    [decode(r[0]) for r in rows]
    return time.perf_counter() - t0


async def main(dsn: str) -> None:
    pool = corpus()
    conn = await asyncpg.connect(dsn)
    kinds = ("text", "jsonb")
    try:
        print(f"{'case':<22}{'text':>12}{'jsonb':>12}{'jsonb/text':>12}")
        for label, n, limit in CASES:
            queries: dict[str, tuple[str, tuple[object, ...]]] = {}
            for kind in kinds:
                table = f"bench_{kind}"
                await fill(conn, table, kind, n, pool)
                where = "WHERE user_id = $1 AND session_id = $2 AND agent_id = $3"
                if limit is None:
                    queries[kind] = (
                        f"SELECT record FROM {table} {where} ORDER BY seq",
                        ("u", "s", "a"),
                    )
                else:
                    sql = f"SELECT record FROM {table} {where} ORDER BY seq DESC LIMIT $4"
                    queries[kind] = (sql, ("u", "s", "a", limit))
            runs = 60 if n == 1000 and limit is None else 400
            samples: dict[str, list[float]] = {kind: [] for kind in kinds}
            for run in range(runs + 20):  # alternate, so machine noise hits both alike
                for kind in kinds if run % 2 else kinds[::-1]:
                    elapsed = await timed(conn, *queries[kind])
                    if run >= 20:  # the first runs warm caches and prepared statements
                        samples[kind].append(elapsed)
            medians = {kind: statistics.median(samples[kind]) for kind in kinds}
            for kind in kinds:
                await conn.execute(f"DROP TABLE bench_{kind}")
            ratio = medians["jsonb"] / medians["text"]
            print(
                f"{label:<22}{medians['text'] * 1e6:>10.0f}µs{medians['jsonb'] * 1e6:>10.0f}µs"
                f"{ratio:>11.2f}x"
            )
    finally:
        await conn.close()


async def _median(call: Callable[[int], Awaitable[object]], runs: int) -> float:
    samples = []
    for n in range(runs + 20):
        t0 = time.perf_counter()
        await call(n)
        if n >= 20:  # warm-up: pool connections, prepared statements
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


async def store_paths(dsn: str) -> None:
    from storage.message import ChatKey
    from storage.stores.postgres import PostgresChatStorage

    pool = corpus()
    key = ChatKey("bench", "s", "a")
    async with PostgresChatStorage(dsn, schema="bench_paths") as store:
        await store.delete(key)
        for start in range(0, 1000, 100):
            await store.save_messages(
                key, [_fresh(pool[i % len(pool)]) for i in range(start, start + 100)]
            )
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("DROP TABLE IF EXISTS bench_v1")
            await conn.execute(
                "CREATE TABLE bench_v1 (seq bigserial PRIMARY KEY, user_id text, session_id text, "
                "agent_id text, message_id text, created_at timestamptz, record text)"
            )
            await conn.execute("CREATE INDEX ON bench_v1 (user_id, session_id, agent_id, seq)")
            await conn.execute(
                "CREATE UNIQUE INDEX ON bench_v1 (user_id, session_id, agent_id, message_id)"
            )
            v1_insert = (
                "INSERT INTO bench_v1 (user_id, session_id, agent_id, message_id, created_at, "
                "record) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING RETURNING seq"
            )

            async def v1_save(n: int) -> None:
                m = _fresh(pool[n % len(pool)])
                await conn.fetchval(v1_insert, "bench", "s", "a", m.id, m.created_at, encode(m))

            last = (await store.head(key)).last_seq
            cases: list[tuple[str, Callable[[int], Awaitable[object]]]] = [
                ("save 1 (v1 INSERT)", v1_save),
                ("save 1", lambda n: store.save(key, _fresh(pool[n % len(pool)]))),
                (
                    "save batch of 4",
                    lambda n: store.save_messages(
                        key, [_fresh(pool[(n + i) % len(pool)]) for i in range(4)]
                    ),
                ),
                ("fetch(limit=1)", lambda n: store.fetch(key, limit=1)),
                ("head", lambda n: store.head(key)),
                ("fetch_since(last)", lambda n: store.fetch_since(key, last + 10**9)),
            ]
            print(f"\n{'store path (1,000+ messages)':<30}{'median':>10}")
            for label, call in cases:
                median = await _median(call, 400)
                print(f"{label:<30}{median * 1e6:>8.0f}µs")
            await conn.execute("DROP TABLE bench_v1")
        finally:
            await conn.close()
        await store.delete(key)


def _fresh(m: ChatMessage) -> ChatMessage:
    """A copy with a new id and a timestamp (a new message to store)."""
    return ChatMessage(
        m.role, m.content, m.tool_calls, m.tool_call_id, m.name, created_at=datetime.now(UTC)
    )


async def run(dsn: str) -> None:
    await main(dsn)
    await store_paths(dsn)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        asyncio.run(run(sys.argv[1]))
    else:
        from tests.servers import PostgresServer

        server = PostgresServer()
        try:
            server.start()
            asyncio.run(run(server.dsn))
        finally:
            server.cleanup()

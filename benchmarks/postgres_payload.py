"""PostgreSQL payload column: ``text`` vs ``jsonb``, fetch latency through asyncpg + the codec.

Same rows (real messages from ``examples/data``, encoded by ``storage.codec``) in two tables
that differ only in the record column's type; each fetch is the store's query plus decoding.
Prints the median of many runs per case. Decides ``PostgresChatStorage``'s payload type.

    python -m benchmarks.postgres_payload [DSN]

Without a DSN it starts a throw-away PostgreSQL (``tests/servers.py``; needs initdb/pg_ctl).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
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


if __name__ == "__main__":
    if len(sys.argv) > 1:
        asyncio.run(main(sys.argv[1]))
    else:
        from tests.servers import PostgresServer

        server = PostgresServer()
        try:
            server.start()
            asyncio.run(main(server.dsn))
        finally:
            server.cleanup()

"""The floors: the least work a store of each kind can do (stdlib ``sqlite3`` + ``json.loads``,
a JSONL file read whole, a Python list), measured like every store."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.data import Wire
from benchmarks.subject_base import Op, Subject
from storage.codec import encode
from storage.message import ChatMessage
from storage.stores.sqlite import MIGRATIONS

__all__ = ["FLOORS", "JsonlFloor", "ListFloor", "SQLiteFloor", "SQLiteFloorFull"]


def _records(wires: list[Wire]) -> list[tuple[ChatMessage, str]]:
    now = datetime.now(UTC)
    out = []
    for w in wires:
        m = ChatMessage.from_openai(w, created_at=now)
        out.append((m, encode(m)))
    return out


class SQLiteFloor(Subject):
    """Stdlib sqlite3 + json.loads on chatlayers' own table and records, called synchronously."""

    name = "floor: sqlite3 + json.loads"
    group = "floor"
    is_async = False
    max_size = 100_000
    note = (
        "stdlib `sqlite3` + `json.loads` called synchronously on the same table, index and "
        "record text chatlayers stores; appends: `json.dumps` of the OpenAI dict + one INSERT "
        "(autocommit; a batch: `executemany` in BEGIN/COMMIT), same schema, WAL, "
        "synchronous=normal"
    )
    cases = frozenset(
        {"fetch_all", "fetch_last", "append_one", "append_batch", "crowded", "concurrent"}
    )

    async def open(self) -> None:
        path = self.workdir / "chats.db"
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = normal")
        for step in MIGRATIONS:
            for statement in step:
                conn.execute(statement)
        self.conn = conn

    async def close(self) -> None:
        self.conn.close()

    async def load(self, key: str, wires: list[Wire]) -> None:
        # Written through chatlayers so the rows are byte-identical to its own.
        self._insert(key, [(m.id, m.created_at, r) for m, r in _records(wires)])

    def _insert(self, key: str, rows: list[tuple[str, datetime | None, str]]) -> None:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO messages (user_id, session_id, agent_id, message_id, created_us, record) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [
                ("bench-user", key, "agent", mid, int(at.timestamp() * 1e6) if at else 0, rec)
                for mid, at, rec in rows
            ],
        )
        conn.execute("COMMIT")

    def fetch_op(self, key: str, limit: int | None) -> Op:
        execute, loads = self.conn.execute, json.loads
        params: tuple[Any, ...] = ("bench-user", key, "agent")
        if limit is None:
            query = (
                "SELECT record FROM messages WHERE user_id = ? AND session_id = ? "
                "AND agent_id = ? ORDER BY seq"
            )
            return lambda: [loads(r) for (r,) in execute(query, params).fetchall()]
        query = (
            "SELECT record FROM messages WHERE user_id = ? AND session_id = ? AND agent_id = ? "
            "ORDER BY seq DESC LIMIT ?"
        )
        params = (*params, limit)

        def fetch_last() -> list[Any]:
            rows = execute(query, params).fetchall()
            rows.reverse()
            return [loads(r) for (r,) in rows]

        return fetch_last

    _INSERT = (
        "INSERT INTO messages (user_id, session_id, agent_id, message_id, created_us, record) "
        "VALUES (?, ?, ?, ?, ?, ?)"
    )

    def _append(self, key: str, item: Wire) -> None:
        conn, dumps = self.conn, json.dumps
        row = (
            "bench-user",
            key,
            "agent",
            os.urandom(16).hex(),
            time.time_ns() // 1000,
            dumps(item),
        )
        conn.execute(self._INSERT, row)  # autocommit: one statement, one transaction

    def _append_many(self, key: str, items: list[Wire]) -> None:
        conn, dumps, now = self.conn, json.dumps, time.time_ns() // 1000
        rows = [("bench-user", key, "agent", os.urandom(16).hex(), now, dumps(i)) for i in items]
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(self._INSERT, rows)
        conn.execute("COMMIT")


class JsonlFloor(Subject):
    """One JSON-lines file per conversation read with plain file I/O + json.loads, synchronously."""

    name = "floor: JSONL read + json.loads"
    group = "floor"
    is_async = False
    max_size = 100_000
    note = (
        "synchronous `open`/`read` of a JSON-lines file of chatlayers records + `json.loads`; "
        "`limit`: read backwards from the end in 64 KiB blocks"
    )
    cases = frozenset({"fetch_all", "fetch_last", "concurrent"})

    def _path(self, key: str) -> Path:
        return self.workdir / f"{key}.jsonl"

    async def load(self, key: str, wires: list[Wire]) -> None:
        with open(self._path(key), "a", encoding="utf-8") as f:  # noqa: ASYNC230 (setup)
            f.writelines(r + "\n" for _, r in _records(wires))

    def fetch_op(self, key: str, limit: int | None) -> Op:
        path, loads = str(self._path(key)), json.loads
        if limit is None:

            def read_all() -> list[Any]:
                with open(path, "rb") as f:
                    data = f.read()
                return [loads(line) for line in data.splitlines() if line]

            return read_all

        def read_tail() -> list[Any]:
            with open(path, "rb") as f:
                end = f.seek(0, os.SEEK_END)
                pos, data = end, b""
                while pos > 0 and data.count(b"\n") <= limit:
                    step = min(65536, pos)
                    pos -= step
                    f.seek(pos)
                    data = f.read(step) + data
            lines = data.splitlines()
            if pos > 0:
                lines = lines[1:]  # first line may be cut
            return [loads(line) for line in lines[-limit:] if line]

        return read_tail


class ListFloor(Subject):
    """A Python list of message objects: copying it is the least any read can cost."""

    name = "floor: list copy"
    group = "floor"
    is_async = False
    max_size = 100_000
    note = "`list(messages)` / `messages[-20:]` of ChatMessage objects already in memory"
    cases = frozenset({"fetch_all", "fetch_last", "concurrent"})

    async def open(self) -> None:
        self.lists: dict[str, list[ChatMessage]] = {}

    async def load(self, key: str, wires: list[Wire]) -> None:
        self.lists.setdefault(key, []).extend(ChatMessage.from_openai(w) for w in wires)

    def fetch_op(self, key: str, limit: int | None) -> Op:
        lst = self.lists[key]
        if limit is None:
            return lambda: list(lst)
        return lambda: lst[-limit:]


class SQLiteFloorFull(SQLiteFloor):
    name = "floor: sqlite3, synchronous=full"
    append_max_size = 10_000
    note = "the append floor with `PRAGMA synchronous = full` (WAL fsync on every commit)"
    cases = frozenset({"append_one", "append_batch"})
    durable = True

    async def open(self) -> None:
        await super().open()
        self.conn.execute("PRAGMA synchronous = full")


FLOORS: tuple[type[Subject], ...] = (SQLiteFloor, SQLiteFloorFull, JsonlFloor, ListFloor)

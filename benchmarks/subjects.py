"""What gets measured: a uniform wrapper over chatlayers' stacks, the floors and the peers.

A subject holds conversations under string keys (``"h1000"``) and gives per-call operations:
``fetch_op(key, limit)`` and ``append_op(key, batch)``. Operations are sync or async as the
subject's own API is (``is_async``); loading data (``load``) is never timed.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from benchmarks.data import Wire
from storage.codec import encode
from storage.message import ChatKey, ChatMessage
from storage.stores.sqlite import MIGRATIONS, SQLiteChatStorage

Op = Callable[[], Any]
Prepare = Callable[[int], Awaitable[None]]
LOAD_CHUNK = 1000


class Unavailable(Exception):
    """A subject cannot run here (package missing, server unreachable); the text says why."""


class Subject:
    """Base: a store under a name, with its own files under ``workdir``."""

    name: ClassVar[str] = "?"
    group: ClassVar[str] = "peer"  # "floor" | "ours" | "peer"
    is_async: ClassVar[bool] = True
    max_size: ClassVar[int] = 10_000
    # Cases this subject can run; "crowded" needs a database shared by many sessions.
    cases: ClassVar[frozenset[str]] = frozenset(
        {"fetch_all", "fetch_last", "append_one", "append_batch", "crowded", "concurrent"}
    )
    note: ClassVar[str] = ""
    durable: ClassVar[bool] = False  # appends fsync on commit (compared to the fsync floor)
    append_max_size: ClassVar[int | None] = None  # default: max_size
    shares: ClassVar[type[Subject] | None] = None  # reads another subject's files, loads nothing
    counterpart: ClassVar[str] = ""  # a peer: the chatlayers store of the same kind
    batch_max_size: ClassVar[int] = 10**9  # largest history a batch append is measured at
    batch_note: ClassVar[str] = ""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def native(self, wire: Wire) -> Any:
        """The subject's own message object for one OpenAI message dict."""
        return wire

    async def load(self, key: str, wires: list[Wire]) -> None:
        raise NotImplementedError

    def fetch_op(self, key: str, limit: int | None) -> Op:
        raise NotImplementedError

    def _append(self, key: str, item: Any) -> Any:
        raise NotImplementedError

    def _append_many(self, key: str, items: list[Any]) -> Any:
        raise NotImplementedError

    def append_op(
        self, key: str, batch: int, source: Callable[[int], list[Wire]]
    ) -> tuple[Op, Prepare]:
        """An op appending one message (``batch == 1``) or a batch, and its untimed preparer.

        ``source(n)`` yields fresh wire messages; the preparer converts them to native objects
        before each round so conversion is never on the clock.
        """
        pool: deque[Any] = deque()

        async def prepare(calls: int) -> None:
            pool.clear()
            wires = source(calls * batch)
            natives = [self.native(w) for w in wires]
            if batch == 1:
                pool.extend(natives)
            else:
                pool.extend(natives[i : i + batch] for i in range(0, len(natives), batch))

        pop = pool.popleft
        if batch == 1:
            append = self._append
            return (lambda: append(key, pop())), prepare
        append_many = self._append_many
        return (lambda: append_many(key, pop())), prepare


# --- chatlayers ---------------------------------------------------------------------------------


def chat_key(key: str) -> ChatKey:
    return ChatKey("bench-user", key, "agent")


class Stack(Subject):
    """A chatlayers stack; subclasses build it."""

    group = "ours"
    max_size = 100_000

    def build(self) -> Any:
        raise NotImplementedError

    async def open(self) -> None:
        self.stack = self.build()

    async def close(self) -> None:
        await self.stack.aclose()

    def native(self, wire: Wire) -> ChatMessage:
        return ChatMessage.from_openai(wire)

    async def load(self, key: str, wires: list[Wire]) -> None:
        ck = chat_key(key)
        for i in range(0, len(wires), LOAD_CHUNK):
            await self.stack.save_messages(ck, [self.native(w) for w in wires[i : i + LOAD_CHUNK]])

    def fetch_op(self, key: str, limit: int | None) -> Op:
        fetch, ck = self.stack.fetch, chat_key(key)
        if limit is None:
            return lambda: fetch(ck)
        return lambda: fetch(ck, limit=limit)

    def _append(self, key: str, item: ChatMessage) -> Any:
        return self.stack.save(chat_key(key), item)

    def _append_many(self, key: str, items: list[ChatMessage]) -> Any:
        return self.stack.save_messages(chat_key(key), items)


class OurSQLite(Stack):
    name = "chatlayers sqlite"
    note = "`sqlite:///` default: WAL, synchronous=normal, decoded-message cache on"

    def build(self) -> Any:
        return SQLiteChatStorage(self.workdir / "chats.db")


class OurSQLiteCold(Stack):
    name = "chatlayers sqlite, cache off"
    shares = OurSQLite
    note = "`cache_chars=0`: every fetch decodes every record (the cold path)"
    cases = frozenset({"fetch_all", "fetch_last", "crowded", "concurrent"})

    def build(self) -> Any:
        return SQLiteChatStorage(self.workdir / "chats.db", cache_chars=0)


class OurMemory(Stack):
    name = "chatlayers memory"
    cases = frozenset({"fetch_all", "fetch_last", "append_one", "append_batch", "concurrent"})

    def build(self) -> Any:
        from storage.stores.memory import InMemoryChatStorage

        return InMemoryChatStorage()


class OurJsonl(Stack):
    name = "chatlayers jsonl"
    note = "`jsonl://`: one file per conversation, tail reads for `limit`"
    cases = frozenset({"fetch_all", "fetch_last", "append_one", "append_batch", "concurrent"})

    def build(self) -> Any:
        try:
            from storage.stores.jsonl import JsonlChatStorage
        except ImportError as exc:
            raise Unavailable(f"storage.stores.jsonl not importable: {exc}") from exc
        return JsonlChatStorage(self.workdir / "jsonl")


def _scrubber() -> Any:
    try:
        from storage.pii import PIIScrubber
    except ImportError as exc:
        raise Unavailable(f"storage.pii.PIIScrubber not importable: {exc}") from exc
    return PIIScrubber(secret="benchmark-secret")


class OurScrubSQLite(Stack):
    name = "scrub::sqlite"
    append_max_size = 10_000
    note = (
        "TransformingChatStorage(SQLite, PIIScrubber): appends are scrubbed (setup writes the "
        "histories straight to the inner store; reads never scrub)"
    )
    cases = frozenset({"fetch_all", "fetch_last", "append_one", "append_batch"})

    def build(self) -> Any:
        from storage.layers.transforming import TransformingChatStorage

        self.raw = SQLiteChatStorage(self.workdir / "chats.db")
        return TransformingChatStorage(self.raw, _scrubber())

    async def load(self, key: str, wires: list[Wire]) -> None:
        ck = chat_key(key)
        for i in range(0, len(wires), LOAD_CHUNK):
            await self.raw.save_messages(ck, [self.native(w) for w in wires[i : i + LOAD_CHUNK]])


async def _summarize_keep_turns(history: list[ChatMessage], keep_last: int) -> list[ChatMessage]:
    """Fallback summarizer (used only when summarizers.ExtractiveSummarizer is missing)."""
    from storage.history import last_turns_start

    start = last_turns_start(history, keep_last)
    summary = ChatMessage(
        "system",
        f"Summary of {start} earlier messages.",
        metadata={"chatlayers": {"summary": True}},
    )
    return [summary, *history[start:]]


class OurSummarizing(Stack):
    name = "summarize::scrub::sqlite (active)"
    append_max_size = 10_000
    note = (
        "SummarizingChatStorage(trigger_at=20, keep_last=2) over scrub::sqlite, buffer active: "
        "fetch reads the in-memory buffer whatever the raw length"
    )
    cases = frozenset({"fetch_all", "fetch_last", "append_one", "append_batch"})

    def build(self) -> Any:
        from storage.layers.summarizing import SummarizingChatStorage
        from storage.layers.transforming import TransformingChatStorage

        try:
            from summarizers.extractive import ExtractiveSummarizer

            summarizer: Any = ExtractiveSummarizer()
            self.summarizer_name = "ExtractiveSummarizer"
        except ImportError:
            summarizer = _summarize_keep_turns
            self.summarizer_name = "a trivial keep-last-turns summarizer"
        # Raw data is loaded straight into the inner SQLite store (scrubbing 100k messages
        # would only slow setup; reads never scrub).
        self.raw = SQLiteChatStorage(self.workdir / "chats.db")
        scrub = TransformingChatStorage(self.raw, _scrubber())
        return SummarizingChatStorage(scrub, summarizer, trigger_at=20, keep_last=2)

    async def close(self) -> None:
        await self.stack.aclose()

    async def load(self, key: str, wires: list[Wire]) -> None:
        ck = chat_key(key)
        for i in range(0, len(wires), LOAD_CHUNK):
            await self.raw.save_messages(ck, [self.native(w) for w in wires[i : i + LOAD_CHUNK]])
        await self.stack.fetch(ck)  # activates the buffer (runs the summarizer once)
        if len(wires) > 40 and not self.stack.is_active(ck):
            raise RuntimeError(f"summarizing buffer of {key} did not activate")


class Server(Stack):
    """A chatlayers server store, when its env var names a reachable server."""

    env: ClassVar[str] = ""
    cases = frozenset({"fetch_all", "fetch_last", "append_one", "append_batch", "concurrent"})
    max_size = 10_000

    def url(self) -> str:
        value = os.environ.get(self.env)
        if not value:
            raise Unavailable(f"set {self.env} to a reachable server to measure it")
        return value

    async def open(self) -> None:
        await super().open()
        try:
            await self.stack.delete_user("bench-user")
        except Exception as exc:
            raise Unavailable(f"server not reachable: {exc}") from exc


class OurRedis(Server):
    name = "chatlayers redis"
    env = "CHATLAYERS_BENCH_REDIS_URL"

    def build(self) -> Any:
        url = self.url()
        try:
            from storage.stores.redis import RedisChatStorage
        except ImportError as exc:
            raise Unavailable(f"storage.stores.redis not importable: {exc}") from exc
        return RedisChatStorage(url)


class OurPostgres(Server):
    name = "chatlayers postgres"
    env = "CHATLAYERS_BENCH_POSTGRES_DSN"

    def build(self) -> Any:
        dsn = self.url()
        try:
            from storage.stores.postgres import PostgresChatStorage
        except ImportError as exc:
            raise Unavailable(f"storage.stores.postgres not importable: {exc}") from exc
        return PostgresChatStorage(dsn)


# --- floors -------------------------------------------------------------------------------------


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


class OurSQLiteFull(OurSQLite):
    name = "chatlayers sqlite, synchronous=full"
    append_max_size = 10_000
    note = "`SQLiteChatStorage(path, synchronous='full')`: fsync of the WAL on every commit"
    cases = frozenset({"append_one", "append_batch"})
    durable = True

    def build(self) -> Any:
        return SQLiteChatStorage(self.workdir / "chats.db", synchronous="full")


class SQLiteFloorFull(SQLiteFloor):
    name = "floor: sqlite3, synchronous=full"
    append_max_size = 10_000
    note = "the append floor with `PRAGMA synchronous = full` (WAL fsync on every commit)"
    cases = frozenset({"append_one", "append_batch"})
    durable = True

    async def open(self) -> None:
        await super().open()
        self.conn.execute("PRAGMA synchronous = full")


OURS: tuple[type[Subject], ...] = (
    OurSQLite,
    OurSQLiteCold,
    OurSQLiteFull,
    OurMemory,
    OurJsonl,
    OurScrubSQLite,
    OurSummarizing,
    OurRedis,
    OurPostgres,
)
FLOORS: tuple[type[Subject], ...] = (SQLiteFloor, SQLiteFloorFull, JsonlFloor, ListFloor)

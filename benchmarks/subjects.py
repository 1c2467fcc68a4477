"""What gets measured: a uniform wrapper over chatlayers' stacks, the floors and the peers.

The base (:class:`Subject`) is in :mod:`benchmarks.subject_base`, the floors in
:mod:`benchmarks.floors` (both importable from here too); this module holds chatlayers'
stacks. A subject holds conversations under string keys (``"h1000"``) and gives per-call
operations: ``fetch_op(key, limit)`` and ``append_op(key, batch)``. Operations are sync or
async as the subject's own API is (``is_async``); loading data (``load``) is never timed.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from benchmarks.data import Wire
from benchmarks.floors import FLOORS, JsonlFloor, ListFloor, SQLiteFloor, SQLiteFloorFull
from benchmarks.subject_base import LOAD_CHUNK, Op, Prepare, Subject, Unavailable, chat_key
from storage.message import ChatMessage
from storage.stores.sqlite import SQLiteChatStorage

# --- chatlayers ---------------------------------------------------------------------------------


__all__ = [
    "FLOORS",
    "LOAD_CHUNK",
    "OURS",
    "JsonlFloor",
    "ListFloor",
    "Op",
    "OurJsonl",
    "OurMemory",
    "OurPostgres",
    "OurRedis",
    "OurSQLite",
    "OurSQLiteCold",
    "OurSQLiteFull",
    "OurScrubSQLite",
    "OurSummarizing",
    "Prepare",
    "SQLiteFloor",
    "SQLiteFloorFull",
    "Server",
    "Stack",
    "Subject",
    "Unavailable",
    "chat_key",
]


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


class OurSQLiteFull(OurSQLite):
    name = "chatlayers sqlite, synchronous=full"
    append_max_size = 10_000
    note = "`SQLiteChatStorage(path, synchronous='full')`: fsync of the WAL on every commit"
    cases = frozenset({"append_one", "append_batch"})
    durable = True

    def build(self) -> Any:
        return SQLiteChatStorage(self.workdir / "chats.db", synchronous="full")


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

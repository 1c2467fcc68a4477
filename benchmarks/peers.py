"""The peers: what users would pick instead, each driven through its own public API.

Each peer stores the same OpenAI messages converted to its own message type (noted per peer).
Setup (``load``) may go around a peer's API where that API is quadratic (noted); timed
operations always use the public API a user would call.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from benchmarks.data import Wire
from benchmarks.subjects import LOAD_CHUNK, Op, Subject, Unavailable


def _need(module: str, package: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise Unavailable(f"`pip install {package}` ({exc})") from exc


class OpenAIAgents(Subject):
    counterpart = "chatlayers sqlite"
    durable = True  # SQLite's default synchronous=full: each commit fsyncs
    name = "OpenAI Agents SQLiteSession"
    package = "openai-agents"
    note = (
        "`agents.SQLiteSession` (file DB, its defaults: WAL, synchronous=full), items are the "
        "OpenAI chat dicts as JSON; `get_items(limit=20)`; each call hops to a thread"
    )

    async def open(self) -> None:
        self.mod = _need("agents.memory.sqlite_session", "openai-agents")
        self.path = self.workdir / "agents.db"
        self.sessions: dict[str, Any] = {}

    def _session(self, key: str) -> Any:
        s = self.sessions.get(key)
        if s is None:
            s = self.sessions[key] = self.mod.SQLiteSession(key, self.path)
        return s

    async def close(self) -> None:
        for s in self.sessions.values():
            s.close()

    async def load(self, key: str, wires: list[Wire]) -> None:
        for i in range(0, len(wires), LOAD_CHUNK):
            await self._session(key).add_items(wires[i : i + LOAD_CHUNK])

    def fetch_op(self, key: str, limit: int | None) -> Op:
        get = self._session(key).get_items
        return lambda: get(limit)

    def _append(self, key: str, item: Wire) -> Any:
        return self._session(key).add_items([item])

    def _append_many(self, key: str, items: list[Wire]) -> Any:
        return self._session(key).add_items(items)


def _lc_messages(wires: list[Wire]) -> list[Any]:
    from langchain_core.messages import convert_to_messages

    return convert_to_messages(
        [
            {**{k: v for k, v in w.items() if v is not None}, "content": w.get("content") or ""}
            for w in wires
        ]
    )


class _LangChainHistory(Subject):
    """What both LangChain histories share: message conversion, reads and appends through a
    ``BaseChatMessageHistory`` returned by ``_h(key)``."""

    def _h(self, key: str) -> Any:
        raise NotImplementedError

    def native(self, wire: Wire) -> Any:
        return _lc_messages([wire])[0]

    def fetch_op(self, key: str, limit: int | None) -> Op:
        h = self._h(key)
        if limit is None:
            return lambda: h.messages
        return lambda: h.messages[-limit:]

    def _append(self, key: str, item: Any) -> Any:
        return self._h(key).add_message(item)

    def _append_many(self, key: str, items: list[Any]) -> Any:
        return self._h(key).add_messages(items)


class LangChainSQL(_LangChainHistory):
    counterpart = "chatlayers sqlite"
    durable = True  # SQLite's default synchronous=full: each commit fsyncs
    name = "LangChain SQLChatMessageHistory"
    is_async = False
    package = "langchain-community sqlalchemy"
    note = (
        "`langchain_community` SQLChatMessageHistory on one shared SQLAlchemy engine "
        "(`sqlite:///`, sync mode: its default for a URL), LangChain messages from "
        "`convert_to_messages`; no limit API, so newest 20 = `messages[-20:]`"
    )

    async def open(self) -> None:
        sql = _need("langchain_community.chat_message_histories.sql", "langchain-community")
        sqlalchemy = _need("sqlalchemy", "sqlalchemy")
        self.engine = sqlalchemy.create_engine(f"sqlite:///{self.workdir / 'lc.db'}")
        self.cls = sql.SQLChatMessageHistory
        self.histories: dict[str, Any] = {}

    def _h(self, key: str) -> Any:
        h = self.histories.get(key)
        if h is None:
            h = self.histories[key] = self.cls(key, connection=self.engine)
        return h

    async def close(self) -> None:
        self.engine.dispose()

    async def load(self, key: str, wires: list[Wire]) -> None:
        for i in range(0, len(wires), LOAD_CHUNK):
            self._h(key).add_messages(_lc_messages(wires[i : i + LOAD_CHUNK]))


class LangChainFile(_LangChainHistory):
    counterpart = "chatlayers jsonl"
    name = "LangChain FileChatMessageHistory"
    is_async = False
    package = "langchain-community"
    note = (
        "one JSON file per conversation; every append re-reads and rewrites the whole file "
        "(setup writes the file directly, since building 10,000 messages through "
        "`add_message` is quadratic)"
    )
    cases = frozenset({"fetch_all", "fetch_last", "append_one", "append_batch", "concurrent"})
    batch_max_size = 1_000
    batch_note = (
        "`add_messages` rewrites the whole file once per message: about 100 times the single "
        "append figure, ~15 s a batch at 10,000 messages"
    )

    async def open(self) -> None:
        self.mod = _need("langchain_community.chat_message_histories.file", "langchain-community")
        self.histories: dict[str, Any] = {}

    def _h(self, key: str) -> Any:
        h = self.histories.get(key)
        if h is None:
            h = self.histories[key] = self.mod.FileChatMessageHistory(
                str(self.workdir / f"{key}.json")
            )
        return h

    async def load(self, key: str, wires: list[Wire]) -> None:
        from langchain_core.messages import messages_to_dict

        h = self._h(key)
        existing = messages_to_dict(h.messages)
        existing.extend(messages_to_dict(_lc_messages(wires)))
        Path(h.file_path).write_text(json.dumps(existing, ensure_ascii=h.ensure_ascii))  # noqa: ASYNC240


def _squad_message(wire: Wire) -> Any:
    """agent-squad's Bedrock-style ConversationMessage: text, toolUse and toolResult blocks."""
    from agent_squad.types import ConversationMessage  # type: ignore[import-untyped]

    blocks: list[Any] = []
    content = wire.get("content")
    if wire["role"] == "tool":
        text = content if isinstance(content, str) else json.dumps(content)
        blocks.append(
            {"toolResult": {"toolUseId": wire["tool_call_id"], "content": [{"text": text}]}}
        )
    elif isinstance(content, str):
        blocks.append({"text": content})
    elif content:
        blocks.extend(content)
    for call in wire.get("tool_calls") or ():
        blocks.append(
            {
                "toolUse": {
                    "toolUseId": call["id"],
                    "name": call["function"]["name"],
                    "input": call["function"]["arguments"],
                }
            }
        )
    role = "assistant" if wire["role"] == "assistant" else "user"
    return ConversationMessage(role=role, content=blocks)


class AgentSquadSQL(Subject):
    counterpart = "chatlayers sqlite"
    durable = True  # SQLite's default synchronous=full: each commit fsyncs
    name = "agent-squad SqlChatStorage"
    package = "agent-squad libsql-client"
    note = (
        "`agent_squad.storage.SqlChatStorage('file:…')` (libsql-client, local file: a new "
        "sqlite3 connection per statement, synchronous inside `async def`); Bedrock-style "
        "content blocks; `fetch_chat(max_history_size=20)` reads the whole history; every save "
        "re-reads the whole history; setup inserts rows in its schema directly"
    )

    async def open(self) -> None:
        storage = _need("agent_squad.storage", "agent-squad")
        if not hasattr(storage, "SqlChatStorage"):
            _need("libsql_client", "libsql-client")
            raise Unavailable("agent_squad.storage.SqlChatStorage missing")
        self.path = self.workdir / "squad.db"
        self.store = storage.SqlChatStorage(f"file:{self.path}")
        await self.store.initialize()
        self.next_index: dict[str, int] = {}

    async def close(self) -> None:
        await self.store.close()

    def native(self, wire: Wire) -> Any:
        return _squad_message(wire)

    async def load(self, key: str, wires: list[Wire]) -> None:
        start = self.next_index.get(key, 0)
        now = int(time.time() * 1000)
        rows = [
            ("bench-user", key, "agent", start + i, m.role, json.dumps(m.content), now + start + i)
            for i, m in enumerate(_squad_message(w) for w in wires)
        ]
        self.next_index[key] = start + len(rows)
        with sqlite3.connect(self.path) as conn:
            conn.executemany("INSERT INTO conversations VALUES (?, ?, ?, ?, ?, ?, ?)", rows)

    def fetch_op(self, key: str, limit: int | None) -> Op:
        fetch = self.store.fetch_chat
        return lambda: fetch("bench-user", key, "agent", limit)

    def _append(self, key: str, item: Any) -> Any:
        # save_chat_messages([m]): save_chat_message drops a message whose role equals the
        # previous one's, which real traces (tool results after user turns) hit.
        return self.store.save_chat_messages("bench-user", key, "agent", [item])

    def _append_many(self, key: str, items: list[Any]) -> Any:
        return self.store.save_chat_messages("bench-user", key, "agent", items)


class AgentSquadMemory(Subject):
    counterpart = "chatlayers memory"
    name = "agent-squad InMemoryChatStorage"
    package = "agent-squad"
    note = "`InMemoryChatStorage`: each fetch rebuilds ConversationMessage objects"
    cases = frozenset({"fetch_all", "fetch_last", "append_one", "append_batch", "concurrent"})

    async def open(self) -> None:
        storage = _need("agent_squad.storage", "agent-squad")
        self.store = storage.InMemoryChatStorage()

    def native(self, wire: Wire) -> Any:
        return _squad_message(wire)

    async def load(self, key: str, wires: list[Wire]) -> None:
        await self.store.save_chat_messages(
            "bench-user", key, "agent", [self.native(w) for w in wires]
        )

    def fetch_op(self, key: str, limit: int | None) -> Op:
        fetch = self.store.fetch_chat
        return lambda: fetch("bench-user", key, "agent", limit)

    def _append(self, key: str, item: Any) -> Any:
        return self.store.save_chat_messages("bench-user", key, "agent", [item])

    def _append_many(self, key: str, items: list[Any]) -> Any:
        return self.store.save_chat_messages("bench-user", key, "agent", items)


async def _squad_summarizer(history: list[Any], keep_last: int) -> list[Any]:
    from agent_squad.types import ConversationMessage

    recent = history[-keep_last * 2 :] if keep_last else []
    summary = ConversationMessage(
        role="user", content=[{"text": f"[Summary of {len(history) - len(recent)} messages]"}]
    )
    return [summary, *recent]


class AgentSquadSummarizing(AgentSquadSQL):
    counterpart = "summarize::scrub::sqlite (active)"
    name = "agent-squad SummarizingChatStorage (active)"
    note = (
        "`SummarizingChatStorage(SqlChatStorage('file:…'), trigger_at=20, keep_last=2)` (a "
        "persistent inner store, like ours) with a constant-time summarizer, buffer active "
        "from 41 messages on; `fetch_chat` then returns its live buffer list (no copy: a "
        "caller appending to it changes the store) and ignores `max_history_size`"
    )
    cases = frozenset({"fetch_all", "fetch_last", "append_one", "append_batch"})

    async def open(self) -> None:
        await super().open()
        storage = _need("agent_squad.storage", "agent-squad")
        if not hasattr(storage, "SummarizingChatStorage"):
            raise Unavailable("this agent-squad version has no SummarizingChatStorage")
        self.sql = self.store
        self.store = storage.SummarizingChatStorage(
            self.sql, _squad_summarizer, trigger_at=20, keep_last=2
        )

    async def close(self) -> None:
        await self.sql.close()

    async def load(self, key: str, wires: list[Wire]) -> None:
        await super().load(key, wires)
        await self.store.fetch_chat("bench-user", key, "agent")  # activates the buffer


def _li_message(wire: Wire) -> Any:
    from llama_index.core.llms import ChatMessage

    kwargs = {k: wire[k] for k in ("tool_calls", "tool_call_id", "name") if wire.get(k) is not None}
    return ChatMessage(
        role=wire["role"], content=wire.get("content") or "", additional_kwargs=kwargs
    )


class LlamaIndexSQLAlchemy(Subject):
    counterpart = "chatlayers sqlite"
    durable = True  # SQLite's default synchronous=full: each commit fsyncs
    name = "LlamaIndex SQLAlchemyChatStore"
    package = "llama-index-core aiosqlite"
    note = (
        "`llama_index.core.storage.chat_store.sql.SQLAlchemyChatStore` (the store its Memory "
        "uses) on `sqlite+aiosqlite:///`; newest 20 = `get_messages(key, offset=n-20)` "
        "(no newest-N call; the offset is given, not counted)"
    )

    async def open(self) -> None:
        sql = _need("llama_index.core.storage.chat_store.sql", "llama-index-core")
        _need("aiosqlite", "aiosqlite")
        self.store = sql.SQLAlchemyChatStore(
            table_name="chats", async_database_uri=f"sqlite+aiosqlite:///{self.workdir / 'li.db'}"
        )
        self.sizes: dict[str, int] = {}

    async def close(self) -> None:
        engine = getattr(self.store, "_async_engine", None)
        if engine is not None:
            await engine.dispose()

    def native(self, wire: Wire) -> Any:
        return _li_message(wire)

    async def load(self, key: str, wires: list[Wire]) -> None:
        for i in range(0, len(wires), LOAD_CHUNK):
            await self.store.add_messages(key, [_li_message(w) for w in wires[i : i + LOAD_CHUNK]])
        self.sizes[key] = self.sizes.get(key, 0) + len(wires)

    def fetch_op(self, key: str, limit: int | None) -> Op:
        get = self.store.get_messages
        if limit is None:
            return lambda: get(key)
        offset = max(self.sizes[key] - limit, 0)
        return lambda: get(key, offset=offset)

    def _append(self, key: str, item: Any) -> Any:
        return self.store.add_message(key, item)

    def _append_many(self, key: str, items: list[Any]) -> Any:
        return self.store.add_messages(key, items)


class LlamaIndexSQLite(Subject):
    counterpart = "chatlayers sqlite"
    durable = True  # SQLite's default synchronous=full: each commit fsyncs
    name = "LlamaIndex SQLiteChatStore"
    is_async = False
    package = "llama-index-storage-chat-store-sqlite"
    note = (
        "`llama_index.storage.chat_store.sqlite.SQLiteChatStore` (sync API, SQLAlchemy ORM, "
        "JSON column); no limit API, so newest 20 = `get_messages(key)[-20:]`"
    )

    async def open(self) -> None:
        mod = _need(
            "llama_index.storage.chat_store.sqlite", "llama-index-storage-chat-store-sqlite"
        )
        self.store = mod.SQLiteChatStore.from_params(database=str(self.workdir / "li_sqlite.db"))

    def native(self, wire: Wire) -> Any:
        return _li_message(wire)

    async def load(self, key: str, wires: list[Wire]) -> None:
        for i in range(0, len(wires), LOAD_CHUNK):
            self.store.set_messages(key, [_li_message(w) for w in wires[i : i + LOAD_CHUNK]])

    def fetch_op(self, key: str, limit: int | None) -> Op:
        get = self.store.get_messages
        if limit is None:
            return lambda: get(key)
        return lambda: get(key)[-limit:]

    def _append(self, key: str, item: Any) -> Any:
        return self.store.add_message(key, item)

    def _append_many(self, key: str, items: list[Any]) -> Any:
        return self.store.set_messages(key, items)  # inserts (it does not delete first)


PEERS: tuple[type[Subject], ...] = (
    OpenAIAgents,
    LangChainSQL,
    LangChainFile,
    AgentSquadSQL,
    AgentSquadMemory,
    AgentSquadSummarizing,
    LlamaIndexSQLAlchemy,
    LlamaIndexSQLite,
)

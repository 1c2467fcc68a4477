"""The fault hooks of the built-in stores' harnesses (``StoreHarness.damage`` and
``snapshot``): each breaks a derived record behind the store's back the way an operator, a
crash or a bug would, or reads every byte the store holds for the test."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from storage.message import ChatKey

Hook = Callable[[str, ChatKey], "bool | Awaitable[bool]"]

_BAD_MESSAGE = '{"v":1,"id":"x","at":"not a time","m":{"role":"system"}}'


# --- SQLite ------------------------------------------------------------------------------


def sqlite_damage(path: Path) -> Hook:
    def damage(what: str, key: ChatKey) -> bool:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            return _sqlite(conn, what, (key.user_id, key.session_id, key.agent_id))
        finally:
            conn.close()

    return damage


def _sqlite(conn: sqlite3.Connection, what: str, key: tuple[str, str, str]) -> bool:
    where = "user_id = ? AND session_id = ? AND agent_id = ?"
    session = "user_id = ? AND session_id = ?"
    statements: dict[str, tuple[str, tuple[Any, ...]]] = {
        "checkpoint-json": (f"UPDATE checkpoints SET records = '{{not json' WHERE {where}", key),
        "checkpoint-shape": (f"UPDATE checkpoints SET covers_to = 'x' WHERE {where}", key),
        "checkpoint-message": (
            f"UPDATE checkpoints SET records = ? WHERE {where}",
            (_BAD_MESSAGE, *key),
        ),
        "checkpoint-version": (
            f"UPDATE checkpoints SET records = replace(records, '\"v\":1,', '\"v\":99,') "
            f"WHERE {where}",
            key,
        ),
        "head-missing": (f"DELETE FROM conversations WHERE {where}", key),
        "head-garbled": (
            "UPDATE conversations SET epoch = '', checkpoint_version = 'x', "
            f"message_count = 'many' WHERE {where}",
            key,
        ),
        "session-missing": (f"DELETE FROM sessions WHERE {session}", key[:2]),
        "session-garbled": (
            "UPDATE sessions SET last_us = 'later', message_count = message_count + 7 "
            f"WHERE {session}",
            key[:2],
        ),
        # A segment of the FTS5 index gone: SQLite reports the index as malformed.
        "search-index": ("DELETE FROM messages_fts_data WHERE id > 10", ()),
        "newer-format": ("PRAGMA user_version = 99", ()),
    }
    if what not in statements:
        return False
    sql, params = statements[what]
    changed = conn.execute(sql, params).rowcount
    return changed != 0 or what in ("newer-format",)


def sqlite_snapshot(path: Path) -> Callable[[], object]:
    def snapshot() -> object:
        return {
            name: Path(name).read_bytes()
            for name in (str(path), f"{path}-wal")
            if os.path.exists(name)
        }

    return snapshot


# --- JSONL -------------------------------------------------------------------------------


def jsonl_damage(root: Path) -> Hook:
    from storage.stores.jsonl.names import key_paths

    def damage(what: str, key: ChatKey) -> bool:
        paths = key_paths(str(root), key.user_id, key.session_id, key.agent_id)
        if what.startswith("checkpoint-"):
            sidecar = Path(paths.ckpt)
            body = json.loads(sidecar.read_bytes())
            if what == "checkpoint-json":
                sidecar.write_bytes(sidecar.read_bytes()[:-20])
                return True
            if what == "checkpoint-shape":
                body["version"] = "three"
            elif what == "checkpoint-message":
                body["messages"] = [_BAD_MESSAGE]
            else:
                body["v"] = 99
            sidecar.write_text(json.dumps(body))
            return True
        summary = Path(paths.session_dir) / ".summary"
        if what == "session-missing":
            summary.unlink(missing_ok=True)
            return True
        if what == "session-garbled":
            summary.write_text('{"v":1,"files":{"x.jsonl":[1,2,"three"]},"active":"soon"}')
            return True
        if what == "newer-format":
            for file in root.rglob("*.jsonl"):
                file.write_bytes(file.read_bytes().replace(b'"v":1,', b'"v":99,'))
            return True
        return False  # heads and search are read from the files themselves

    return damage


def jsonl_snapshot(root: Path) -> Callable[[], object]:
    def snapshot() -> object:
        return {
            str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
        }

    return snapshot


# --- Redis -------------------------------------------------------------------------------


def redis_damage(url: str, prefix: str, *, cluster: bool = False) -> Hook:
    from storage.stores.redis.layout import Layout

    layout = Layout(prefix)

    def damage(what: str, key: ChatKey) -> bool:
        client = _redis_client(url, cluster)
        try:
            names = layout.key(key)
            if what.startswith("checkpoint-"):
                raw = client.get(names.checkpoint)
                assert raw is not None
                if what == "checkpoint-json":
                    client.set(names.checkpoint, raw[:-20])
                    return True
                body = json.loads(raw)
                messages = "messages" if "messages" in body else "m"  # the first spelling
                if what == "checkpoint-shape":
                    body[messages] = 5
                elif what == "checkpoint-message":
                    body[messages] = [_BAD_MESSAGE]
                else:
                    body["v"] = 99
                client.set(names.checkpoint, json.dumps(body))
                return True
            if what == "head-missing":
                return bool(client.delete(names.head))
            if what == "head-garbled":
                client.hset(names.head, mapping={"l": "x", "n": "many", "c": "?"})
                return True
            if what == "session-missing":  # the session's counter, time and version
                return bool(client.delete(names.session))
            if what == "session-garbled":
                client.hset(names.session, mapping={"q": "x", "t": "later", "v": "?"})
                client.sadd(names.agents, "%FF%FE")
                if not cluster:  # the user's index lives in another slot
                    index, _ = layout.index(key.user_id)
                    client.zadd(index, {b"\xff\xfe": 1})
                return True
            if what == "newer-format":
                client.set(f"{prefix}:format", "99")
                return True
            return False  # no search index: a scan of the user's sessions
        finally:
            client.close()

    return damage


def redis_snapshot(url: str, prefix: str, *, cluster: bool = False) -> Callable[[], object]:
    def snapshot() -> object:
        client = _redis_client(url, cluster)
        try:
            keys = sorted(client.scan_iter(match=f"{prefix}:*", count=1000))
            return {k: (client.dump(k), client.pttl(k)) for k in keys}
        finally:
            client.close()

    return snapshot


def _redis_client(url: str, cluster: bool) -> Any:
    import redis

    base = url.partition("?")[0]
    if cluster:
        return redis.RedisCluster.from_url(base)
    return redis.Redis.from_url(base)


# --- PostgreSQL ----------------------------------------------------------------------------


def postgres_damage(dsn: str, schema: str) -> Hook:
    async def damage(what: str, key: ChatKey) -> bool:
        import asyncpg

        t = f'"{schema}".chatlayers_messages'
        where = "user_id = $1 AND session_id = $2 AND agent_id = $3"
        args = (key.user_id, key.session_id, key.agent_id)
        statements = {
            "checkpoint-json": (
                f"UPDATE {t}_checkpoints SET record = 'not json' WHERE {where}",
                args,
            ),
            "checkpoint-shape": (
                f"UPDATE {t}_checkpoints SET record = '{{\"messages\": 5}}' WHERE {where}",
                args,
            ),
            "checkpoint-message": (
                f"UPDATE {t}_checkpoints SET record = $4 WHERE {where}",
                (*args, json.dumps({"summarizer": "x", "messages": [_BAD_MESSAGE]})),
            ),
            "checkpoint-version": (
                f"UPDATE {t}_checkpoints SET record = replace(record, '\"v\":1,', '\"v\":99,') "
                f"WHERE {where}",
                args,
            ),
            "head-missing": (f"DELETE FROM {t}_keys WHERE {where}", args),
            "head-garbled": (
                f"UPDATE {t}_keys SET last_seq = 0, message_count = 99 WHERE {where}",
                args,
            ),
            "session-missing": (
                f"DELETE FROM {t}_sessions WHERE user_id = $1 AND session_id = $2",
                args[:2],
            ),
            "session-garbled": (
                f"UPDATE {t}_sessions SET message_count = message_count + 7, agents = '{{}}' "
                "WHERE user_id = $1 AND session_id = $2",
                args[:2],
            ),
            "newer-format": (f"UPDATE {t}_version SET version = 99", ()),
        }
        if what not in statements:
            return False  # the search words are a column of each message row
        sql, params = statements[what]
        conn = await asyncpg.connect(dsn.partition("?")[0])
        try:
            status = await conn.execute(sql, *params)
        finally:
            await conn.close()
        return not status.endswith(" 0")

    return damage


def postgres_snapshot(dsn: str, schema: str) -> Callable[[], Awaitable[object]]:
    async def snapshot() -> object:
        import asyncpg

        conn = await asyncpg.connect(dsn.partition("?")[0])
        try:
            tables = await conn.fetch(
                "SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1", schema
            )
            out = {}
            for (table,) in tables:
                rows = await conn.fetch(f'SELECT t::text FROM "{schema}"."{table}" t ORDER BY 1')
                out[table] = [r[0] for r in rows]
            return out
        finally:
            await conn.close()

    return snapshot

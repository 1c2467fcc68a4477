"""The store's schema: forward migrations, the version table, refusing a newer database.

``MIGRATIONS[n]`` takes a database from schema version ``n`` to ``n + 1``; a fresh database
runs them all, so the path an upgraded database takes is the one every test takes. The
version lives in ``<table>_version`` (one row). A database whose version is above
:data:`SCHEMA_VERSION` was written by a newer chatlayers: opening it raises
:class:`~storage.errors.SchemaVersionError` naming both versions, before anything is written.

Version 1 (chatlayers 0.1): one messages table, a global ``bigserial`` sequence.
Version 3 (time travel): ``<table>_rewinds`` (one row per rewind of a key, numbered from the
key's sequence), ``<table>_rewound`` (one row per hidden message, which every read of the
view leaves out), ``<table>_cp_versions`` (every version of each key's checkpoint, filled
from the current ones), a ``void`` flag on checkpoints (a checkpoint a rewind voided keeps
its version as the head's), and the functions made again. A release knowing version 2
refuses a version-3 database: it would show rewound messages as part of the view.

Version 2: per-key sequence numbers (``key_seq``) assigned under the key's row lock in
``<table>_keys``, per-session summaries, checkpoints, leases, records, a full-text index, and
the server-side functions of the write path (:mod:`.functions`).

The ``search`` column's comment names how its words are made (:data:`SEARCH_WORDS`). A
database whose words were made the older way (before words reached the parser whole,
:func:`storage.stores.postgres.text.search_term`) has the rows that can differ re-indexed once
on open, under the same advisory lock; the schema version does not change (older releases
still read the database).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from storage.codec import decode
from storage.errors import CorruptRecordError, SchemaVersionError
from storage.stores.postgres.functions import FUNCTIONS
from storage.stores.postgres.names import Names, ident
from storage.stores.postgres.text import search_words

if TYPE_CHECKING:
    import asyncpg
    from asyncpg.pool import PoolConnectionProxy

    Connection = asyncpg.Connection[Any] | PoolConnectionProxy[Any]
else:
    Connection = Any

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SEARCH_WORDS", "migrate", "read_version"]

SEARCH_WORDS: Final = "chatlayers search words 2"
# Records whose words may be encoded (a word with "_", a non-ASCII letter, "qz" or over 200
# characters): only those can have been indexed differently before.
_MAY_DIFFER: Final = r"_|[^\x01-\x7f]|[qQ][zZ]|[[:alnum:]]{201,}"

_V1: Final = (
    """CREATE TABLE IF NOT EXISTS {t} (
        seq bigserial PRIMARY KEY,
        user_id text NOT NULL,
        session_id text NOT NULL,
        agent_id text NOT NULL,
        message_id text NOT NULL,
        created_at timestamptz NOT NULL,
        record text NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS {by_key} ON {t} (user_id, session_id, agent_id, seq)",
    "CREATE UNIQUE INDEX IF NOT EXISTS {by_id} ON {t} (user_id, session_id, agent_id, message_id)",
)

_V2: Final = (
    # Per-key sequence: v1's global numbers increase within each key, so they are kept as
    # the first per-key numbers; the global ``seq`` stays as the cross-agent tie-break of
    # ``fetch_all_chats`` (save order between keys).
    "ALTER TABLE {t} ADD COLUMN key_seq bigint",
    "UPDATE {t} SET key_seq = seq",
    "ALTER TABLE {t} ALTER COLUMN key_seq SET NOT NULL",
    "ALTER TABLE {t} ADD COLUMN search tsvector",
    "DROP INDEX IF EXISTS {schema}.{by_key}",
    "CREATE UNIQUE INDEX {by_key} ON {t} (user_id, session_id, agent_id, key_seq)",
    "CREATE INDEX {by_time} ON {t} (created_at)",
    "CREATE INDEX {fts} ON {t} USING gin (search)",
    """CREATE TABLE {keys} (
        user_id text NOT NULL,
        session_id text NOT NULL,
        agent_id text NOT NULL,
        last_seq bigint NOT NULL,
        epoch text NOT NULL,
        message_count bigint NOT NULL DEFAULT 0,
        first_at timestamptz,
        last_at timestamptz,
        PRIMARY KEY (user_id, session_id, agent_id)
    )""",
    """INSERT INTO {keys} (user_id, session_id, agent_id, last_seq, epoch, message_count,
                           first_at, last_at)
       SELECT user_id, session_id, agent_id, max(key_seq), gen_random_uuid()::text, count(*),
              min(created_at), max(created_at)
       FROM {t} GROUP BY user_id, session_id, agent_id""",
    """CREATE TABLE {sessions} (
        user_id text NOT NULL,
        session_id text COLLATE "C" NOT NULL,
        agents text[] NOT NULL,
        message_count bigint NOT NULL,
        first_at timestamptz NOT NULL,
        last_at timestamptz NOT NULL,
        PRIMARY KEY (user_id, session_id)
    )""",
    "CREATE INDEX {sessions_last} ON {sessions} (user_id, last_at DESC, session_id)",
    """INSERT INTO {sessions} (user_id, session_id, agents, message_count, first_at, last_at)
       SELECT user_id, session_id, array_agg(agent_id ORDER BY agent_id COLLATE "C"),
              sum(message_count), min(first_at), max(last_at)
       FROM {keys} GROUP BY user_id, session_id""",
    """CREATE TABLE {checkpoints} (
        user_id text NOT NULL,
        session_id text NOT NULL,
        agent_id text NOT NULL,
        version integer NOT NULL,
        epoch text NOT NULL,
        covers_to bigint NOT NULL,
        created_at timestamptz NOT NULL,
        record text NOT NULL,
        PRIMARY KEY (user_id, session_id, agent_id)
    )""",
    """CREATE TABLE {leases} (
        user_id text NOT NULL,
        session_id text NOT NULL,
        agent_id text NOT NULL,
        owner text NOT NULL,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (user_id, session_id, agent_id)
    )""",
    """CREATE TABLE {records} (
        user_id text NOT NULL,
        session_id text NOT NULL,
        agent_id text NOT NULL,
        key_seq bigint NOT NULL,
        record_id text NOT NULL,
        kind text NOT NULL,
        created_at timestamptz NOT NULL,
        record text NOT NULL
    )""",
    "CREATE UNIQUE INDEX {records_by_seq} ON {records} (user_id, session_id, agent_id, key_seq)",
    "CREATE UNIQUE INDEX {records_by_id} ON {records} (user_id, session_id, agent_id, record_id)",
    *FUNCTIONS,
)


async def _backfill_search(conn: Connection, names: Names, where: str = "") -> None:
    """v2: index the text of messages stored by v1 (decoded here: the record is JSON text
    that ``jsonb`` cannot always read, and the indexed words are chatlayers' own); with
    ``where``, re-index the rows it selects."""
    t = names.messages
    last = 0
    while True:
        rows = await conn.fetch(
            f"SELECT seq, record FROM {t} WHERE seq > $1 {where} ORDER BY seq LIMIT 1000", last
        )
        if not rows:
            return
        seqs: list[int] = []
        words: list[str] = []
        for seq, record in rows:
            try:
                words.append(search_words(decode(record)))
            except CorruptRecordError:
                words.append("")
            seqs.append(seq)
        await conn.execute(
            f"UPDATE {t} SET search = to_tsvector('simple', u.words) "
            f"FROM unnest($1::bigint[], $2::text[]) AS u(seq, words) WHERE {t}.seq = u.seq",
            seqs,
            words,
        )
        last = seqs[-1]


_V3: Final = (
    """CREATE TABLE {rewinds} (
        user_id text NOT NULL,
        session_id text NOT NULL,
        agent_id text NOT NULL,
        key_seq bigint NOT NULL,
        rewind_id text NOT NULL,
        to_id text NOT NULL,
        to_seq bigint NOT NULL,
        through_seq bigint NOT NULL,
        hidden integer NOT NULL,
        created_at timestamptz NOT NULL,
        PRIMARY KEY (user_id, session_id, agent_id, key_seq)
    )""",
    """CREATE TABLE {rewound} (
        user_id text NOT NULL,
        session_id text NOT NULL,
        agent_id text NOT NULL,
        key_seq bigint NOT NULL,
        rewind_seq bigint NOT NULL,
        PRIMARY KEY (user_id, session_id, agent_id, key_seq)
    )""",
    """CREATE TABLE {versions_cp} (
        user_id text NOT NULL,
        session_id text NOT NULL,
        agent_id text NOT NULL,
        version integer NOT NULL,
        epoch text NOT NULL,
        covers_to bigint NOT NULL,
        created_at timestamptz NOT NULL,
        record text NOT NULL,
        PRIMARY KEY (user_id, session_id, agent_id, version)
    )""",
    "ALTER TABLE {checkpoints} ADD COLUMN void boolean NOT NULL DEFAULT false",
    """INSERT INTO {versions_cp} (user_id, session_id, agent_id, version, epoch, covers_to,
                                created_at, record)
       SELECT user_id, session_id, agent_id, version, epoch, covers_to, created_at, record
       FROM {checkpoints}""",
    *FUNCTIONS,
)

Step = tuple[tuple[str, ...], Callable[[Connection, Names], Awaitable[None]] | None]

# MIGRATIONS[n]: (SQL statements, then an optional Python step) from version n to n + 1.
MIGRATIONS: Final[tuple[Step, ...]] = ((_V1, None), (_V2, _backfill_search), (_V3, None))
SCHEMA_VERSION: Final = len(MIGRATIONS)


async def read_version(conn: Connection, names: Names) -> int | None:
    """The database's schema version, or ``None`` when the store's tables do not exist."""
    table = names.qualified("version")
    if await conn.fetchval("SELECT to_regclass($1)", table) is None:
        return None
    value = await conn.fetchval(f"SELECT max(version) FROM {table}")
    return int(value or 0)


def _refuse_newer(version: int, names: Names, known: int) -> None:
    if version > known:
        raise SchemaVersionError(
            f"PostgreSQL table {names.schema}.{names.table} has schema version {version}, "
            f"newer than version {known}, the newest this chatlayers knows: upgrade "
            "chatlayers to use it (nothing was written)"
        )


async def _words_current(conn: Connection, names: Names) -> bool:
    """Whether the ``search`` column's words are made as this release makes them."""
    comment = await conn.fetchval(
        "SELECT col_description(a.attrelid, a.attnum) FROM pg_attribute a "
        "WHERE a.attrelid = to_regclass($1) AND a.attname = 'search'",
        names.messages,
    )
    return bool(comment == SEARCH_WORDS)


async def _mark_words(conn: Connection, names: Names) -> None:
    await conn.execute(f"COMMENT ON COLUMN {names.messages}.search IS '{SEARCH_WORDS}'")


async def migrate(conn: Connection, names: Names) -> None:
    """Create the schema or bring it to :data:`SCHEMA_VERSION` (and its search words to
    :data:`SEARCH_WORDS`), under an advisory lock (one migrator at a time across processes;
    the others wait, then find it done).

    Raises:
        SchemaVersionError: the database was written by a newer chatlayers (nothing written).
    """
    steps = MIGRATIONS
    known = len(steps)
    version = await read_version(conn, names)
    if version is not None:
        _refuse_newer(version, names, known)
        if version == known and await _words_current(conn, names):
            return
    template = names.template()
    async with conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext($1))",
            f"chatlayers:{names.schema}.{names.table}",
        )
        if not await conn.fetchval("SELECT 1 FROM pg_namespace WHERE nspname = $1", names.schema):
            await conn.execute(f"CREATE SCHEMA {ident(names.schema)}")
        table = names.qualified("version")
        await conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (version integer NOT NULL)")
        version = await read_version(conn, names) or 0
        _refuse_newer(version, names, known)
        if version == known:
            if await _words_current(conn, names):
                return
            # Words made by an older release: the rows that can differ, made again.
            await _backfill_search(conn, names, f"AND record ~ '{_MAY_DIFFER}'")
            await _mark_words(conn, names)
            return
        for statements, python_step in steps[version:]:
            for statement in statements:
                await conn.execute(statement.format(**template))
            if python_step is not None:
                await python_step(conn, names)
        await _mark_words(conn, names)  # every row's words were made by this release
        await conn.execute(f"DELETE FROM {table}")
        await conn.execute(f"INSERT INTO {table} (version) VALUES ($1)", known)

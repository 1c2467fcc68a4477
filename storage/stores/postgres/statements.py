"""The SQL the client sends, built once per store from its names."""

from __future__ import annotations

import attrs

from storage.stores.postgres.names import Names

__all__ = ["Statements"]

_KEY = "user_id = $1 AND session_id = $2 AND agent_id = $3"


@attrs.frozen(slots=True)
class Statements:
    """Every statement of one store (``$1, $2, $3`` are always the key's parts)."""

    save: str
    fetch: str
    fetch_last: str
    session_rows: str
    delete: str
    delete_user: str
    list_keys: str
    head: str
    fetch_since: str
    load_checkpoint: str
    lock_key: str
    checkpoint_state: str
    upsert_checkpoint: str
    acquire_lease: str
    release_lease: str
    list_sessions: str
    list_sessions_after: str
    list_sessions_moved: str
    moved_times: str
    search: str
    save_record: str
    fetch_records: str
    fetch_records_of_kind: str
    purge: str
    # Time travel (``timetravel``) and checkpoint versions.
    timeline: str
    rewinds: str
    visible_seq: str
    visible_after: str
    take_seq: str
    insert_rewind: str
    insert_rewound: str
    checkpoint_row: str
    restamp_checkpoint: str
    void_checkpoint: str
    copy_version: str
    load_version: str
    # Retention, tool groups whole (``retention``).
    purge_keys: str
    last_old: str
    purge_rows: str
    purge_more: str
    purge_delete: str
    drop_checkpoint: str
    recount_key: str
    drop_empty_key: str
    refresh: str
    # A session's last activity kept across deletes (``core``).
    session_last: str
    keep_last: str
    # Derived rows rebuilt from the messages (``derived``).
    repair_key: str
    sessions_check: str
    rebuild_user_keys: str
    empty_user_keys: str
    refresh_user: str

    @classmethod
    def build(cls, names: Names) -> Statements:
        n = names.template()
        t, keys, cp = n["t"], n["keys"], n["checkpoints"]
        rewound, cpv = n["rewound"], n["versions_cp"]
        # The view leaves out the rewound messages (an anti-join on the rewound table).
        view = (
            f"NOT EXISTS (SELECT 1 FROM {rewound} r WHERE r.user_id = $1 "
            f"AND r.session_id = $2 AND r.agent_id = $3 AND r.key_seq = {t}.key_seq)"
        )
        head = (
            # ORDER BY ... LIMIT 1, not max(): one backward index step whatever the
            # planner's statistics say (max() over stale statistics scanned the whole key).
            f"SELECT coalesce((SELECT key_seq FROM {t} WHERE {_KEY} "
            "ORDER BY key_seq DESC LIMIT 1), 0) AS last_seq, "
            "coalesce(k.epoch, '') AS epoch, "
            "CASE WHEN c.epoch = k.epoch THEN c.version ELSE 0 END AS checkpoint_version "
            "FROM (SELECT 1) AS one "
            f"LEFT JOIN {keys} k ON k.user_id = $1 AND k.session_id = $2 AND k.agent_id = $3 "
            f"LEFT JOIN {cp} c ON c.user_id = $1 AND c.session_id = $2 AND c.agent_id = $3"
        )
        return cls(
            save=f"SELECT {n['f_save']}($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            fetch=f"SELECT record FROM {t} WHERE {_KEY} AND {view} ORDER BY key_seq",
            fetch_last=(
                f"SELECT record FROM {t} WHERE {_KEY} AND {view} ORDER BY key_seq DESC LIMIT $4"
            ),
            # Every message of the session, a rewound one with the time of its rewind.
            session_rows=(
                f"SELECT m.seq, m.agent_id, m.record, w.created_at FROM {t} m "
                f"LEFT JOIN {rewound} r ON r.user_id = m.user_id "
                "AND r.session_id = m.session_id AND r.agent_id = m.agent_id "
                f"AND r.key_seq = m.key_seq LEFT JOIN {n['rewinds']} w "
                "ON w.user_id = r.user_id AND w.session_id = r.session_id "
                "AND w.agent_id = r.agent_id AND w.key_seq = r.rewind_seq "
                "WHERE m.user_id = $1 AND m.session_id = $2"
            ),
            delete=f"SELECT {n['f_delete']}($1, $2, $3)",
            delete_user=f"SELECT {n['f_delete_user']}($1)",
            list_keys=(
                f"SELECT user_id, session_id, agent_id FROM {keys} WHERE message_count > 0 "
                "AND ($1::text IS NULL OR user_id = $1) "
                "AND ($2::text IS NULL OR session_id = $2)"
            ),
            head=head,
            # One statement, so the head and the rows come from one snapshot.
            fetch_since=(
                f"WITH h AS ({head}) "
                "SELECT NULL::bigint AS key_seq, NULL::text AS record, h.last_seq, h.epoch, "
                "h.checkpoint_version FROM h "
                "UNION ALL "
                f"SELECT key_seq, record, NULL, NULL, NULL FROM {t} "
                f"WHERE {_KEY} AND key_seq > $4 AND {view}"
            ),
            load_checkpoint=(
                f"SELECT c.version, c.epoch, c.covers_to, c.created_at, c.record FROM {cp} c "
                f"JOIN {keys} k USING (user_id, session_id, agent_id) "
                "WHERE c.user_id = $1 AND c.session_id = $2 AND c.agent_id = $3 "
                "AND c.epoch = k.epoch AND NOT c.void"
            ),
            lock_key=f"SELECT epoch FROM {keys} WHERE {_KEY} FOR UPDATE",
            checkpoint_state=(
                f"SELECT EXISTS (SELECT 1 FROM {t} WHERE {_KEY} AND key_seq = $4 AND {view}), "
                f"(SELECT CASE WHEN epoch = $5 THEN version ELSE 0 END FROM {cp} "
                f"WHERE {_KEY})"
            ),
            upsert_checkpoint=(
                f"INSERT INTO {cp} (user_id, session_id, agent_id, version, epoch, covers_to, "
                "created_at, record) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
                "ON CONFLICT (user_id, session_id, agent_id) DO UPDATE SET "
                "version = excluded.version, epoch = excluded.epoch, "
                "covers_to = excluded.covers_to, created_at = excluded.created_at, "
                "record = excluded.record, void = false"
            ),
            # $6: the store's clock, or NULL for the server's (no skew between workers).
            acquire_lease=(
                f"INSERT INTO {n['leases']} AS l (user_id, session_id, agent_id, owner, "
                "expires_at) VALUES ($1, $2, $3, $4, "
                "coalesce($6::timestamptz, clock_timestamp()) + make_interval(secs => $5)) "
                "ON CONFLICT (user_id, session_id, agent_id) DO UPDATE SET "
                "owner = excluded.owner, expires_at = excluded.expires_at "
                "WHERE l.owner = excluded.owner "
                "OR l.expires_at <= coalesce($6::timestamptz, clock_timestamp()) "
                "RETURNING owner"
            ),
            release_lease=f"DELETE FROM {n['leases']} WHERE {_KEY} AND owner = $4",
            list_sessions=(
                "SELECT session_id, agents, message_count, first_at, last_at "
                f"FROM {n['sessions']} WHERE user_id = $1 "
                "ORDER BY last_at DESC, session_id LIMIT $2"
            ),
            # ``last_at <= $3`` is the index range; the rest filters the ties only.
            list_sessions_after=(
                "SELECT session_id, agents, message_count, first_at, last_at "
                f"FROM {n['sessions']} WHERE user_id = $1 AND last_at <= $3 "
                "AND (last_at < $3 OR session_id > $4) "
                "ORDER BY last_at DESC, session_id LIMIT $2"
            ),
            # Sessions saved to since a listing walk's first page (past its bound).
            list_sessions_moved=(
                "SELECT session_id, agents, message_count, first_at, last_at "
                f"FROM {n['sessions']} WHERE user_id = $1 AND last_at > $2"
            ),
            moved_times=(
                f"SELECT session_id, max(created_at) FROM {t} WHERE user_id = $1 "
                "AND session_id = ANY($2::text[]) AND created_at <= $3 GROUP BY session_id"
            ),
            # The tsquery written out twice (not joined in FROM), so it is an index condition.
            search=(
                "SELECT m.session_id, m.agent_id, m.record, "
                "ts_rank(m.search, websearch_to_tsquery('simple', $2)) AS rank "
                f"FROM {t} m WHERE m.user_id = $1 "
                "AND m.search @@ websearch_to_tsquery('simple', $2) "
                "ORDER BY rank DESC, m.created_at DESC, m.seq DESC LIMIT $3"
            ),
            save_record=f"SELECT * FROM {n['f_record']}($1, $2, $3, $4, $5, $6, $7)",
            fetch_records=(
                f"SELECT key_seq, created_at, record FROM {n['records']} WHERE {_KEY} "
                "ORDER BY key_seq"
            ),
            fetch_records_of_kind=(
                f"SELECT key_seq, created_at, record FROM {n['records']} "
                f"WHERE {_KEY} AND kind = $4 ORDER BY key_seq"
            ),
            purge=f"SELECT {n['f_purge']}($1)",
            timeline=f"SELECT key_seq, record FROM {t} WHERE {_KEY} ORDER BY key_seq",
            rewinds=(
                "SELECT key_seq, rewind_id, to_id, to_seq, through_seq, hidden, created_at "
                f"FROM {n['rewinds']} WHERE {_KEY} ORDER BY key_seq"
            ),
            visible_seq=(f"SELECT key_seq FROM {t} WHERE {_KEY} AND message_id = $4 AND {view}"),
            visible_after=(
                f"SELECT key_seq FROM {t} WHERE {_KEY} AND key_seq > $4 AND {view} ORDER BY key_seq"
            ),
            # The rewind's own number from the key's sequence, and a new epoch.
            take_seq=(
                f"UPDATE {keys} SET last_seq = last_seq + 1, epoch = gen_random_uuid()::text "
                f"WHERE {_KEY} RETURNING last_seq, epoch"
            ),
            insert_rewind=(
                f"INSERT INTO {n['rewinds']} (user_id, session_id, agent_id, key_seq, "
                "rewind_id, to_id, to_seq, through_seq, hidden, created_at) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
            ),
            insert_rewound=(
                f"INSERT INTO {rewound} (user_id, session_id, agent_id, key_seq, rewind_seq) "
                "SELECT $1, $2, $3, s, $5 FROM unnest($4::bigint[]) AS s"
            ),
            checkpoint_row=(
                f"SELECT version, epoch, covers_to, void FROM {cp} WHERE {_KEY} FOR UPDATE"
            ),
            restamp_checkpoint=(
                f"UPDATE {cp} SET epoch = $4, version = $5 WHERE {_KEY} "
                "RETURNING version, epoch, covers_to, created_at, record"
            ),
            void_checkpoint=f"UPDATE {cp} SET epoch = $4, void = true WHERE {_KEY}",
            copy_version=(
                f"INSERT INTO {cpv} (user_id, session_id, agent_id, version, epoch, covers_to, "
                "created_at, record) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
                "ON CONFLICT (user_id, session_id, agent_id, version) DO UPDATE SET "
                "epoch = excluded.epoch, covers_to = excluded.covers_to, "
                "created_at = excluded.created_at, record = excluded.record"
            ),
            load_version=(
                f"SELECT version, epoch, covers_to, created_at, record FROM {cpv} "
                f"WHERE {_KEY} AND version = $4"
            ),
            purge_keys=(
                f"SELECT DISTINCT user_id, session_id, agent_id FROM {t} WHERE created_at < $1 "
                "ORDER BY user_id, session_id, agent_id"
            ),
            last_old=f"SELECT max(key_seq) FROM {t} WHERE {_KEY} AND created_at < $4",
            purge_rows=(
                f"SELECT key_seq, created_at, record FROM {t} WHERE {_KEY} AND key_seq <= $4 "
                "ORDER BY key_seq"
            ),
            purge_more=(
                f"SELECT key_seq, record FROM {t} WHERE {_KEY} AND key_seq > $4 "
                "ORDER BY key_seq LIMIT $5"
            ),
            purge_delete=(
                f"WITH gone AS (DELETE FROM {rewound} WHERE {_KEY} "
                f"AND key_seq = ANY($4::bigint[])) "
                f"DELETE FROM {t} WHERE {_KEY} AND key_seq = ANY($4::bigint[])"
            ),
            # The checkpoint and every version of it (the record was renumbered).
            drop_checkpoint=(
                f"WITH gone AS (DELETE FROM {cpv} WHERE {_KEY}) DELETE FROM {cp} WHERE {_KEY}"
            ),
            recount_key=(
                f"UPDATE {keys} k SET epoch = gen_random_uuid()::text, "
                "(message_count, first_at, last_at) = (SELECT count(*), min(created_at), "
                f"max(created_at) FROM {t} m WHERE m.user_id = $1 AND m.session_id = $2 "
                "AND m.agent_id = $3) WHERE k.user_id = $1 AND k.session_id = $2 "
                "AND k.agent_id = $3"
            ),
            drop_empty_key=(
                f"DELETE FROM {keys} k WHERE {_KEY} AND k.message_count = 0 AND NOT EXISTS "
                f"(SELECT 1 FROM {n['records']} r WHERE r.user_id = $1 AND r.session_id = $2 "
                "AND r.agent_id = $3)"
            ),
            refresh=f"SELECT {n['f_refresh']}($1, $2)",
            session_last=(
                f"SELECT last_at FROM {n['sessions']} WHERE user_id = $1 AND session_id = $2"
            ),
            keep_last=(
                f"UPDATE {n['sessions']} SET last_at = greatest(last_at, $3) "
                "WHERE user_id = $1 AND session_id = $2"
            ),
            repair_key=(
                f"INSERT INTO {keys} AS k (user_id, session_id, agent_id, last_seq, epoch, "
                "message_count, first_at, last_at) "
                f"SELECT $1, $2, $3, greatest((SELECT coalesce(max(key_seq), 0) FROM {t} "
                f"WHERE {_KEY}), (SELECT coalesce(max(key_seq), 0) FROM {n['records']} "
                f"WHERE {_KEY})), gen_random_uuid()::text, count(*), min(created_at), "
                f"max(created_at) FROM {t} WHERE {_KEY} "
                "ON CONFLICT (user_id, session_id, agent_id) DO UPDATE SET "
                "last_seq = greatest(k.last_seq, excluded.last_seq), epoch = excluded.epoch, "
                "message_count = excluded.message_count, first_at = excluded.first_at, "
                "last_at = excluded.last_at"
            ),
            sessions_check=(
                f"SELECT (SELECT count(*) FROM {n['sessions']} WHERE user_id = $1) = "
                f"(SELECT count(DISTINCT session_id) FROM {keys} WHERE user_id = $1 "
                "AND message_count > 0) "
                f"AND (SELECT coalesce(sum(message_count), 0) FROM {n['sessions']} "
                "WHERE user_id = $1) = "
                f"(SELECT coalesce(sum(message_count), 0) FROM {keys} WHERE user_id = $1)"
            ),
            rebuild_user_keys=(
                "WITH m AS (SELECT session_id, agent_id, max(key_seq) AS top, count(*) AS n, "
                f"min(created_at) AS f, max(created_at) AS l FROM {t} WHERE user_id = $1 "
                "GROUP BY session_id, agent_id) "
                f"INSERT INTO {keys} AS k (user_id, session_id, agent_id, last_seq, epoch, "
                "message_count, first_at, last_at) "
                "SELECT $1, session_id, agent_id, top, gen_random_uuid()::text, n, f, l FROM m "
                "ON CONFLICT (user_id, session_id, agent_id) DO UPDATE SET "
                "last_seq = greatest(k.last_seq, excluded.last_seq), "
                "epoch = CASE WHEN (k.message_count, k.first_at, k.last_at) IS NOT DISTINCT FROM "
                "(excluded.message_count, excluded.first_at, excluded.last_at) THEN k.epoch "
                "ELSE excluded.epoch END, message_count = excluded.message_count, "
                "first_at = excluded.first_at, last_at = excluded.last_at"
            ),
            empty_user_keys=(
                f"UPDATE {keys} k SET message_count = 0, first_at = NULL, last_at = NULL, "
                "epoch = gen_random_uuid()::text WHERE k.user_id = $1 AND k.message_count <> 0 "
                f"AND NOT EXISTS (SELECT 1 FROM {t} m WHERE m.user_id = k.user_id "
                "AND m.session_id = k.session_id AND m.agent_id = k.agent_id)"
            ),
            refresh_user=(
                f"SELECT {n['f_refresh']}($1, s.session_id) FROM (SELECT session_id "
                f'COLLATE "C" AS session_id FROM {keys} WHERE user_id = $1 UNION '
                f"SELECT session_id FROM {n['sessions']} WHERE user_id = $1) AS s"
            ),
        )

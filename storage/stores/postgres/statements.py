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
    search: str
    save_record: str
    fetch_records: str
    fetch_records_of_kind: str
    purge: str

    @classmethod
    def build(cls, names: Names) -> Statements:
        n = names.template()
        t, keys, cp = n["t"], n["keys"], n["checkpoints"]
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
            fetch=f"SELECT record FROM {t} WHERE {_KEY} ORDER BY key_seq",
            fetch_last=f"SELECT record FROM {t} WHERE {_KEY} ORDER BY key_seq DESC LIMIT $4",
            session_rows=(
                f"SELECT seq, agent_id, record FROM {t} WHERE user_id = $1 AND session_id = $2"
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
                f"WHERE {_KEY} AND key_seq > $4"
            ),
            load_checkpoint=(
                f"SELECT c.version, c.epoch, c.covers_to, c.created_at, c.record FROM {cp} c "
                f"JOIN {keys} k USING (user_id, session_id, agent_id) "
                "WHERE c.user_id = $1 AND c.session_id = $2 AND c.agent_id = $3 "
                "AND c.epoch = k.epoch"
            ),
            lock_key=f"SELECT epoch FROM {keys} WHERE {_KEY} FOR UPDATE",
            checkpoint_state=(
                f"SELECT EXISTS (SELECT 1 FROM {t} WHERE {_KEY} AND key_seq = $4), "
                f"(SELECT CASE WHEN epoch = $5 THEN version ELSE 0 END FROM {cp} "
                f"WHERE {_KEY})"
            ),
            upsert_checkpoint=(
                f"INSERT INTO {cp} (user_id, session_id, agent_id, version, epoch, covers_to, "
                "created_at, record) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
                "ON CONFLICT (user_id, session_id, agent_id) DO UPDATE SET "
                "version = excluded.version, epoch = excluded.epoch, "
                "covers_to = excluded.covers_to, created_at = excluded.created_at, "
                "record = excluded.record"
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
        )

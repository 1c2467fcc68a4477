"""Server-side functions of the write path (PL/pgSQL), created by schema version 2 and made
again (``CREATE OR REPLACE``) by version 3, which erases the time-travel tables with a key.

Each write is one call, so one round trip and one implicit transaction:

- ``<table>_lock_key(u, s, a)``: the key's row in ``<table>_keys``, created on first use and
  locked ``FOR UPDATE``. Every writer of a key queues on this lock, so a batch gets
  consecutive sequence numbers (``last_seq + 1 .. n``) and numbers follow commit order: a
  reader tailing a key by sequence never misses a row committed later with a smaller number.
  Each statement after it runs on a fresh snapshot (READ COMMITTED), so it sees everything
  committed before the lock was granted.
- ``<table>_save(...)``: append a batch (ids already stored skipped: their numbers stay
  unused, so a retried batch can leave a gap, never a reordering), or with ``p_replace``
  replace the whole record under a new epoch (the checkpoint, its versions and the rewinds
  dropped); with ``p_expected``
  refuse with SQLSTATE ``CL409`` unless the key's version (``epoch.last_seq``) is that.
- ``<table>_save_record``, ``<table>_delete``, ``<table>_delete_user``, ``<table>_purge``,
  and ``<table>_refresh`` (recompute one session's summary row from its keys' rows).

Lock order is always key rows (sorted by user, session, agent) before session rows, so
concurrent writers, deletes and purges never deadlock.
"""

from __future__ import annotations

from typing import Final

__all__ = ["CONFLICT_SQLSTATE", "FUNCTIONS"]

CONFLICT_SQLSTATE: Final = "CL409"

_KEY: Final = "user_id = p_user AND session_id = p_session AND agent_id = p_agent"

_LOCK: Final = f"""
CREATE OR REPLACE FUNCTION {{f_lock}}(p_user text, p_session text, p_agent text,
    OUT o_last bigint, OUT o_epoch text, OUT o_created boolean)
LANGUAGE plpgsql AS $fn$
BEGIN
    SELECT last_seq, epoch INTO o_last, o_epoch FROM {{keys}} WHERE {_KEY} FOR UPDATE;
    o_created := false;
    IF NOT FOUND THEN
        INSERT INTO {{keys}} (user_id, session_id, agent_id, last_seq, epoch)
        VALUES (p_user, p_session, p_agent, 0, gen_random_uuid()::text)
        ON CONFLICT (user_id, session_id, agent_id) DO NOTHING;
        o_created := FOUND;
        SELECT last_seq, epoch INTO o_last, o_epoch FROM {{keys}} WHERE {_KEY} FOR UPDATE;
    END IF;
END $fn$"""

_REFRESH: Final = """
CREATE OR REPLACE FUNCTION {f_refresh}(p_user text, p_session text) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM {sessions} WHERE user_id = p_user AND session_id = p_session;
    INSERT INTO {sessions} (user_id, session_id, agents, message_count, first_at, last_at)
    SELECT p_user, p_session, array_agg(agent_id ORDER BY agent_id COLLATE "C"),
           sum(message_count), min(first_at), max(last_at)
    FROM {keys}
    WHERE user_id = p_user AND session_id = p_session AND message_count > 0
    HAVING count(*) > 0;
END $fn$"""

_SAVE: Final = f"""
CREATE OR REPLACE FUNCTION {{f_save}}(p_user text, p_session text, p_agent text,
    p_ids text[], p_ats timestamptz[], p_records text[], p_words text[],
    p_expected text, p_replace boolean)
RETURNS text[] LANGUAGE plpgsql AS $fn$
DECLARE
    v_last bigint; v_epoch text; v_created boolean; v_max bigint;
    v_ids text[]; v_count bigint; v_first timestamptz; v_newest timestamptz;
BEGIN
    SELECT o_last, o_epoch, o_created INTO v_last, v_epoch, v_created
    FROM {{f_lock}}(p_user, p_session, p_agent);
    IF p_expected IS NOT NULL THEN
        SELECT key_seq INTO v_max FROM {{t}} WHERE {_KEY} ORDER BY key_seq DESC LIMIT 1;
        -- Head.version: "epoch.last_seq", ".0" while the key holds no message.
        IF p_expected IS DISTINCT FROM
           (CASE WHEN v_max IS NULL THEN '.0' ELSE v_epoch || '.' || v_max END) THEN
            RAISE EXCEPTION 'the conversation was written since version %', p_expected
                USING ERRCODE = 'CL409';
        END IF;
    END IF;
    IF p_replace THEN
        DELETE FROM {{t}} WHERE {_KEY};
        DELETE FROM {{checkpoints}} WHERE {_KEY};
        DELETE FROM {{versions_cp}} WHERE {_KEY};
        DELETE FROM {{rewinds}} WHERE {_KEY};
        DELETE FROM {{rewound}} WHERE {_KEY};
        v_epoch := gen_random_uuid()::text;
        UPDATE {{keys}} SET epoch = v_epoch, message_count = 0, first_at = NULL,
            last_at = NULL WHERE {_KEY};
    END IF;
    -- An id stored already (a retry) is skipped by its unique index (the conflict arbiter:
    -- always an index probe, whatever the planner's statistics), leaving its number unused.
    WITH ins AS (
        INSERT INTO {{t}} (user_id, session_id, agent_id, key_seq, message_id, created_at,
                         record, search)
        SELECT p_user, p_session, p_agent, v_last + m.n, m.id, m.at, m.rec,
               to_tsvector('simple', m.words)
        FROM unnest(p_ids, p_ats, p_records, p_words) WITH ORDINALITY AS m(id, at, rec, words, n)
        ORDER BY m.n
        ON CONFLICT (user_id, session_id, agent_id, message_id) DO NOTHING
        RETURNING key_seq, message_id, created_at
    )
    SELECT array_agg(message_id ORDER BY key_seq), count(*), max(key_seq), min(created_at),
           max(created_at)
    INTO v_ids, v_count, v_max, v_first, v_newest FROM ins;
    IF v_count > 0 THEN
        UPDATE {{keys}} SET last_seq = v_max, message_count = message_count + v_count,
            first_at = least(first_at, v_first), last_at = greatest(last_at, v_newest)
        WHERE {_KEY};
    END IF;
    IF p_replace THEN
        IF v_count = 0 AND NOT EXISTS (SELECT 1 FROM {{records}} WHERE {_KEY}) THEN
            DELETE FROM {{keys}} WHERE {_KEY};
        END IF;
        PERFORM {{f_refresh}}(p_user, p_session);
    ELSIF v_count > 0 THEN
        INSERT INTO {{sessions}} AS s
            (user_id, session_id, agents, message_count, first_at, last_at)
        VALUES (p_user, p_session, ARRAY[p_agent], v_count, v_first, v_newest)
        ON CONFLICT (user_id, session_id) DO UPDATE SET
            agents = CASE WHEN p_agent = ANY (s.agents) THEN s.agents
                ELSE ARRAY(SELECT a FROM unnest(s.agents || p_agent) AS a
                           ORDER BY a COLLATE "C") END,
            message_count = s.message_count + v_count,
            first_at = least(s.first_at, v_first),
            last_at = greatest(s.last_at, v_newest);
    END IF;
    RETURN coalesce(v_ids, ARRAY[]::text[]);
END $fn$"""

_SAVE_RECORD: Final = f"""
CREATE OR REPLACE FUNCTION {{f_record}}(p_user text, p_session text, p_agent text,
    p_id text, p_kind text, p_at timestamptz, p_record text)
RETURNS TABLE (r_seq bigint, r_at timestamptz, r_record text) LANGUAGE plpgsql AS $fn$
DECLARE
    v_last bigint;
BEGIN
    SELECT o_last INTO v_last FROM {{f_lock}}(p_user, p_session, p_agent);
    INSERT INTO {{records}} (user_id, session_id, agent_id, key_seq, record_id, kind,
                           created_at, record)
    VALUES (p_user, p_session, p_agent, v_last + 1, p_id, p_kind, p_at, p_record)
    ON CONFLICT (user_id, session_id, agent_id, record_id) DO NOTHING;
    IF FOUND THEN
        UPDATE {{keys}} SET last_seq = v_last + 1 WHERE {_KEY};
        RETURN QUERY SELECT v_last + 1, p_at, p_record;
    ELSE  -- stored already: the stored one
        RETURN QUERY SELECT key_seq, created_at, record FROM {{records}}
            WHERE {_KEY} AND record_id = p_id;
    END IF;
END $fn$"""

_DELETE: Final = f"""
CREATE OR REPLACE FUNCTION {{f_delete}}(p_user text, p_session text, p_agent text)
RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM 1 FROM {{keys}} WHERE {_KEY} FOR UPDATE;
    DELETE FROM {{t}} WHERE {_KEY};
    DELETE FROM {{records}} WHERE {_KEY};
    DELETE FROM {{checkpoints}} WHERE {_KEY};
    DELETE FROM {{versions_cp}} WHERE {_KEY};
    DELETE FROM {{rewinds}} WHERE {_KEY};
    DELETE FROM {{rewound}} WHERE {_KEY};
    DELETE FROM {{leases}} WHERE {_KEY};
    DELETE FROM {{keys}} WHERE {_KEY};
    PERFORM {{f_refresh}}(p_user, p_session);
END $fn$"""

_DELETE_USER: Final = """
CREATE OR REPLACE FUNCTION {f_delete_user}(p_user text) RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM 1 FROM {keys} WHERE user_id = p_user
        ORDER BY user_id, session_id, agent_id FOR UPDATE;
    DELETE FROM {t} WHERE user_id = p_user;
    DELETE FROM {records} WHERE user_id = p_user;
    DELETE FROM {checkpoints} WHERE user_id = p_user;
    DELETE FROM {versions_cp} WHERE user_id = p_user;
    DELETE FROM {rewinds} WHERE user_id = p_user;
    DELETE FROM {rewound} WHERE user_id = p_user;
    DELETE FROM {leases} WHERE user_id = p_user;
    DELETE FROM {keys} WHERE user_id = p_user;
    DELETE FROM {sessions} WHERE user_id = p_user;
END $fn$"""

_PURGE: Final = """
CREATE OR REPLACE FUNCTION {f_purge}(p_before timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
    v_deleted bigint := 0; v_n bigint; v_users text[]; v_sessions text[]; v_agents text[];
    v_user text; v_session text; v_agent text;
BEGIN
    -- Every affected key's row locked first, in key order, before any session row: the
    -- lock order of every writer, so purges, saves and deletes never deadlock.
    SELECT array_agg(kk.user_id ORDER BY kk.user_id, kk.session_id, kk.agent_id),
           array_agg(kk.session_id ORDER BY kk.user_id, kk.session_id, kk.agent_id),
           array_agg(kk.agent_id ORDER BY kk.user_id, kk.session_id, kk.agent_id)
    INTO v_users, v_sessions, v_agents
    FROM (
        SELECT k.user_id, k.session_id, k.agent_id FROM {keys} k
        WHERE (k.user_id, k.session_id, k.agent_id) IN (
            SELECT m.user_id, m.session_id, m.agent_id FROM {t} m
            WHERE m.created_at < p_before)
        ORDER BY k.user_id, k.session_id, k.agent_id
        FOR UPDATE OF k
    ) kk;
    FOR i IN 1 .. coalesce(array_length(v_users, 1), 0) LOOP
        v_user := v_users[i]; v_session := v_sessions[i]; v_agent := v_agents[i];
        DELETE FROM {t} WHERE user_id = v_user AND session_id = v_session
            AND agent_id = v_agent AND created_at < p_before;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_deleted := v_deleted + v_n;
        DELETE FROM {checkpoints} WHERE user_id = v_user AND session_id = v_session
            AND agent_id = v_agent;
        DELETE FROM {versions_cp} WHERE user_id = v_user AND session_id = v_session
            AND agent_id = v_agent;
        DELETE FROM {rewound} r WHERE r.user_id = v_user AND r.session_id = v_session
            AND r.agent_id = v_agent AND NOT EXISTS (SELECT 1 FROM {t} m
                WHERE m.user_id = v_user AND m.session_id = v_session
                AND m.agent_id = v_agent AND m.key_seq = r.key_seq);
        UPDATE {keys} k SET epoch = gen_random_uuid()::text,
            (message_count, first_at, last_at) = (
                SELECT count(*), min(created_at), max(created_at) FROM {t} m
                WHERE m.user_id = v_user AND m.session_id = v_session
                  AND m.agent_id = v_agent)
        WHERE k.user_id = v_user AND k.session_id = v_session AND k.agent_id = v_agent;
        DELETE FROM {keys} k WHERE k.user_id = v_user AND k.session_id = v_session
            AND k.agent_id = v_agent AND k.message_count = 0
            AND NOT EXISTS (SELECT 1 FROM {records} r WHERE r.user_id = v_user
                AND r.session_id = v_session AND r.agent_id = v_agent);
    END LOOP;
    FOR i IN 1 .. coalesce(array_length(v_users, 1), 0) LOOP
        IF i = 1 OR v_users[i] <> v_users[i - 1] OR v_sessions[i] <> v_sessions[i - 1] THEN
            PERFORM {f_refresh}(v_users[i], v_sessions[i]);
        END IF;
    END LOOP;
    RETURN v_deleted;
END $fn$"""

# In creation order (a function must exist before one that calls it is first run; PL/pgSQL
# resolves names at run time, so the order only matters for readability).
FUNCTIONS: Final = (_LOCK, _REFRESH, _SAVE, _SAVE_RECORD, _DELETE, _DELETE_USER, _PURGE)

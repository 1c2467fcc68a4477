"""``RedisChatStorage``: every ability of :mod:`storage.abilities` on Redis.

See :mod:`storage.stores.redis` for the layout, the costs and the guarantees.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import cast

import attrs

from storage.abilities import (
    ConversationRecord,
    Head,
    SearchHit,
    SessionInfo,
    SessionPage,
    SummaryCheckpoint,
    Tail,
)
from storage.codec import decode
from storage.errors import ConflictError, CorruptRecordError
from storage.history import prepare_batch, validate_history
from storage.message import ChatKey, ChatMessage, check_key_part, utc_now
from storage.search import check_search_args, scan_search
from storage.stores.base import check_key
from storage.stores.checks import (
    check_after,
    check_checkpoint,
    check_cursor,
    check_expected_version,
    check_lease,
    check_now,
    check_page_limit,
    check_record,
)
from storage.stores.redis import scripts
from storage.stores.redis.core import RedisCore, message_args, new_epoch
from storage.stores.redis.layout import decode_part, entries, entry, known_part, part, to_us
from storage.stores.redis.payloads import (
    decode_checkpoint,
    decode_record,
    encode_checkpoint,
    encode_record,
)
from storage.stores.redis.sessions import broken_agents, page_sessions, session_info

__all__ = ["RedisChatStorage"]

_EMPTY_HEAD = Head(0, "", 0)


def _head(epoch: bytes | str, last: bytes | str, version: bytes | str) -> Head:
    """The head of a key's fields.

    Raises:
        ValueError: a field is not what the scripts write (the head must be rebuilt).
    """
    last_seq = int(last)
    if not last_seq:
        return _EMPTY_HEAD
    text = epoch.decode("ascii") if isinstance(epoch, bytes) else epoch
    if not text:
        raise ValueError("a head without an epoch")
    return Head(last_seq, text, int(version))


class RedisChatStorage(RedisCore):
    """Conversations in Redis, one list per key, on a single server or a Redis Cluster.

    Connections are made on first use (redis-py's pool), so the constructor never blocks.
    Implements every ability of :mod:`storage.abilities`; see :class:`RedisCore` for the
    arguments and :mod:`storage.stores.redis` for the layout and costs.

    Raises:
        ConfigError: redis-py is not installed (``pip install 'chatlayers[redis]'``), or the
            URL or an option is invalid.
    """

    # --- SequencedStorage ----------------------------------------------------------------

    async def head(self, key: ChatKey) -> Head:
        """The key's head (``Head(0, "", 0)`` when it holds no message): one ``HMGET``.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` or a part cannot be stored.
            StorageUnavailableError: Redis cannot be reached (password redacted).
        """
        check_key(key)
        names = self.layout.key(key)
        client = await self._redis.ready()
        epoch, last, version = await client.hmget(names.head, ["e", "l", "c"])
        try:
            head = _head(epoch or b"", last or b"0", version or b"0")
        except ValueError:
            head = None
        # No head: a key holding nothing, or a lost head (one more read, for empty keys only).
        if head is not None and (head.last_seq or not await client.exists(names.messages)):
            return head
        self._derived_unusable("head", key, "lost or unreadable")
        await self._repair_head(key)
        epoch, last, version = await client.hmget(names.head, ["e", "l", "c"])
        return _head(epoch or b"", last or b"0", version or b"0")

    async def fetch_since(self, key: ChatKey, after: int) -> Tail:
        """Raw messages with ``seq > after`` and the head, in one snapshot (one script).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` or a part cannot be stored.
            InvalidArgumentError: ``after`` is not an int >= 0.
            StorageUnavailableError: Redis cannot be reached (password redacted).
            CorruptRecordError: a stored entry cannot be decoded.
        """
        check_key(key)
        check_after(after)
        names = self.layout.key(key)
        epoch, last, version, rows, broken = await self._redis.eval(
            scripts.FETCH_SINCE, [names.messages, names.head], [after]
        )
        if broken:
            self._derived_unusable("head", key, "lost or unreadable")
            await self._repair_head(key)
            epoch, last, version, rows, _ = await self._redis.eval(
                scripts.FETCH_SINCE, [names.messages, names.head], [after]
            )
        head = _head(epoch, last, version)
        seqs: list[int] = []
        messages: list[ChatMessage] = []
        for raw in entries(rows):
            seq, record = entry(raw)
            if seq > after:
                seqs.append(seq)
                messages.append(decode(record))
        return Tail(head, tuple(seqs), tuple(messages))

    # --- CheckpointStorage ---------------------------------------------------------------

    async def load_checkpoint(self, key: ChatKey) -> SummaryCheckpoint | None:
        """The key's checkpoint, or ``None`` (none, or made under another epoch).

        A checkpoint that cannot be read (bad JSON, the wrong shape, a message that does not
        decode, another format version) is logged once, counted in ``corrupt_derived`` and
        ignored: ``None``, while :meth:`head` still reports its version, so the next
        compare-and-set replaces it.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` or a part cannot be stored.
            StorageUnavailableError: Redis cannot be reached (password redacted).
        """
        check_key(key)
        names = self.layout.key(key)
        epoch, raw = await self._redis.eval(
            scripts.LOAD_CHECKPOINT, [names.head, names.checkpoint], []
        )
        if not raw:
            return None
        try:
            checkpoint = decode_checkpoint(raw)
        except CorruptRecordError as exc:
            self._derived_unusable("checkpoint", key, exc)
            return None
        if checkpoint.epoch != epoch.decode("ascii", "replace"):
            return None
        return checkpoint

    async def save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, *, expected_version: int
    ) -> SummaryCheckpoint | None:
        """Compare-and-set the key's checkpoint in one script: stored as version
        ``expected_version + 1`` only if the current version is ``expected_version``, the
        epoch is the key's and ``covers_to`` is the sequence number of a message it holds.

        Returns:
            The checkpoint as stored, or ``None`` when another writer won or the record
            changed (nothing written).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` or a part cannot be stored.
            InvalidArgumentError: a bad ``expected_version`` or checkpoint field.
            InvalidMessageError: a checkpoint message is invalid or not marked as a summary.
            StorageUnavailableError: Redis cannot be reached (password redacted).
        """
        check_key(key)
        check_expected_version(expected_version)
        checkpoint = check_checkpoint(checkpoint)
        stored = attrs.evolve(checkpoint, version=expected_version + 1)
        names = self.layout.key(key)
        done = await self._redis.eval(
            scripts.SAVE_CHECKPOINT,
            [names.messages, names.head, names.checkpoint],
            [
                expected_version,
                checkpoint.epoch,
                checkpoint.covers_to,
                encode_checkpoint(stored),
                self._ttl,
            ],
        )
        return stored if done else None

    async def acquire_lease(self, key: ChatKey, owner: str, ttl: float) -> bool:
        """Take (or extend) the key's summarizing lease for ``ttl`` seconds of the store's
        clock (the server's unless ``clock`` was given): ``SET PX`` in a script that refuses
        while another owner holds an unexpired one.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` or a part cannot be stored.
            InvalidArgumentError: ``owner`` empty or ``ttl`` not > 0.
            StorageUnavailableError: Redis cannot be reached (password redacted).
        """
        check_key(key)
        seconds = check_lease(owner, ttl)
        names = self.layout.key(key)
        ms = max(int(seconds * 1000), 1)
        now = int(self.clock() * 1000) if self.clock is not None else -1
        reply = await self._redis.eval(scripts.ACQUIRE_LEASE, [names.lease], [owner, ms, now])
        return bool(reply)

    async def release_lease(self, key: ChatKey, owner: str) -> None:
        """Give the lease back if ``owner`` holds it (compare-and-delete in one script).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` or a part cannot be stored.
            StorageUnavailableError: Redis cannot be reached (password redacted).
        """
        check_key(key)
        names = self.layout.key(key)
        await self._redis.eval(scripts.RELEASE_LEASE, [names.lease], [owner])

    # --- ReplaceableStorage --------------------------------------------------------------

    async def replace(self, key: ChatKey, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        """Replace the key's messages with ``messages`` in a new epoch, in one script; the
        checkpoint goes, records stay (they are not messages). Returns the messages stored.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` or a part cannot be stored.
            InvalidMessageError: ``messages`` is not a valid history (nothing changed).
            StorageUnavailableError: Redis cannot be reached (password redacted).
        """
        check_key(key)
        batch = prepare_batch(validate_history(list(messages), system="anywhere"))
        names = self.layout.key(key)
        keys = [
            names.messages,
            names.ids,
            names.head,
            names.checkpoint,
            names.records,
            names.agents,
            names.session,
            *self._index_keys(key.user_id),
        ]
        args = [self._ttl, names.agent, new_epoch(), names.base, names.member]
        args += message_args(batch)
        if batch:
            newest = max(to_us(m.created_at) for m in batch if m.created_at is not None)
            await self._register(key.user_id, names.member, newest)
        version, score, exists = await self._redis.eval(scripts.REPLACE, keys, args)
        await self._reindex(key.user_id, names.member, int(version), int(score), bool(exists))
        return list(batch)

    async def save_messages_if(
        self, key: ChatKey, messages: Sequence[ChatMessage], *, expected_version: str
    ) -> list[ChatMessage]:
        """``save_messages`` only if ``head(key).version == expected_version`` (checked in
        the save script itself).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` or a part cannot be stored.
            InvalidMessageError: a message breaks a rule (nothing stored).
            ConflictError: the key's version is not ``expected_version`` (nothing stored).
            StorageUnavailableError: Redis cannot be reached (password redacted).
        """
        check_key(key)
        batch = prepare_batch(messages)
        # "" means "unconditional" to the script; no head has that version.
        if not batch or not isinstance(expected_version, str) or not expected_version:
            version = (await self.head(key)).version
            if version != expected_version:
                raise ConflictError(
                    f"{key}: version is {version!r}, not {expected_version!r}; nothing stored"
                )
            return []
        return await self._save_batch(key, batch, expected_version)

    # --- SessionListing ------------------------------------------------------------------

    async def list_sessions(
        self, user_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> SessionPage:
        """The user's sessions, newest ``last_at`` first, ties by ``session_id`` ascending,
        read from the user's index (a sorted set by last activity) and each listed
        session's heads: the cost grows with the page, not with the messages.

        Raises:
            InvalidKeyError: ``user_id`` is not a valid key part.
            InvalidArgumentError: ``limit`` < 1 or a malformed ``cursor``.
            StorageUnavailableError: Redis cannot be reached (password redacted).
        """
        check_key_part("user_id", user_id)
        check_page_limit(limit)
        after = check_cursor(cursor)
        x, _ = self.layout.index(user_id)
        user = part("user_id", user_id)

        async def read_chunk(max_score: int, offset: int, count: int) -> list[tuple[bytes, float]]:
            client = await self._redis.ready()
            rows = await client.zrevrangebyscore(
                x, max_score, "-inf", start=offset, num=count, withscores=True
            )
            return cast(list[tuple[bytes, float]], rows)

        async def read_infos(members: Sequence[str]) -> list[SessionInfo | None]:
            calls = []
            for member in members:
                base = self.layout.base(user, member)
                calls.append(([f"{base}a", f"{base}s"], [base]))
            replies = await self._redis.eval_many(scripts.SESSION_INFO, calls)
            infos: list[SessionInfo | None] = []
            for member, reply, call in zip(members, replies, calls, strict=True):
                broken = broken_agents(reply)
                if broken:  # messages under a lost head: rebuild it, then read again
                    session_id = decode_part(member)
                    for agent in broken:
                        agent_id = known_part(agent)
                        if agent_id is not None:
                            repaired = ChatKey(user_id, session_id, agent_id)
                            self._derived_unusable("head", repaired, "lost or unreadable")
                            await self._repair_head(repaired)
                    reply = await self._redis.eval(scripts.SESSION_INFO, *call)
                try:
                    infos.append(session_info(member, reply))
                except ValueError as exc:  # an agent this store did not write
                    self._derived_unusable("session agents", f"session {member!r}", exc)
                    infos.append(None)
            return infos

        def unusable(raw: bytes) -> None:
            self._derived_unusable("session index", f"user {user_id!r}", f"member {raw!r}")

        return await page_sessions(read_chunk, read_infos, limit, after, unusable)

    # --- SearchableStorage ---------------------------------------------------------------

    async def search(self, user_id: str, query: str, *, limit: int = 20) -> list[SearchHit]:
        """The user's messages matching ``query``, best first.

        A scan (:func:`storage.search.scan_search`) of the user's sessions only, found in
        the user's index (never a pattern over other users' keys): one atomic read per
        session, pipelined on a single server. Its cost grows with the user's messages, so
        it suits interactive use over one user's history, not a search engine's load.

        Raises:
            InvalidKeyError: ``user_id`` is not a valid key part.
            InvalidArgumentError: a query without words, or ``limit`` < 1.
            StorageUnavailableError: Redis cannot be reached (password redacted).
            CorruptRecordError: a stored entry cannot be decoded.
        """
        check_key_part("user_id", user_id)
        check_search_args(query, limit)
        user = part("user_id", user_id)
        members = await self._members(user_id)
        calls = []
        for member in members:
            base = self.layout.base(user, member)
            calls.append(([f"{base}a"], [base]))
        replies = await self._redis.eval_many(scripts.FETCH_SESSION, calls)
        # Oldest activity first, each session in save order: a tie goes to the later item.
        items: list[tuple[ChatKey, ChatMessage]] = []
        for member, reply in zip(members, replies, strict=True):
            session_id = decode_part(member)
            rows: list[tuple[int, ChatKey, bytes]] = []
            for n in range(0, len(reply), 2):
                agent_id = known_part(reply[n])
                if agent_id is None:
                    self._derived_unusable("session agents", f"session {member!r}", reply[n])
                    continue
                key = ChatKey(user_id, session_id, agent_id)
                for raw in entries(reply[n + 1]):
                    seq, record = entry(raw)
                    rows.append((seq, key, record))
            rows.sort(key=lambda row: row[0])
            items += [(key, decode(record)) for _, key, record in rows]
        return scan_search(query, items, limit=limit)

    # --- RecordStorage -------------------------------------------------------------------

    async def save_record(self, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
        """Store ``record`` with a sequence number from the session's counter (the one
        messages use, so records interleave with them); a no-op returning the stored one
        when its id is stored already.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` or a part cannot be stored.
            InvalidArgumentError: empty ``kind`` or data that is not JSON-like.
            StorageUnavailableError: Redis cannot be reached (password redacted).
        """
        check_key(key)
        check_record(record)
        created = record.created_at.astimezone(UTC) if record.created_at else utc_now()
        record = attrs.evolve(record, created_at=created)
        names = self.layout.key(key)
        keys = [
            names.records,
            names.agents,
            names.session,
            names.messages,
            *self._index_keys(key.user_id),
        ]
        await self._register(key.user_id, names.member, 0)
        reply = await self._redis.eval(
            scripts.SAVE_RECORD,
            keys,
            [record.id, encode_record(record), names.agent, names.member, self._ttl, names.base],
        )
        if reply[0] == 1:
            return decode_record(*entry(reply[1]))
        _, seq, version, score = reply
        await self._reindex(key.user_id, names.member, int(version), int(score), True)
        return attrs.evolve(record, seq=int(seq))

    async def fetch_records(
        self, key: ChatKey, *, kind: str | None = None
    ) -> list[ConversationRecord]:
        """The key's records in store order (sequence), optionally of one ``kind``.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey`` or a part cannot be stored.
            StorageUnavailableError: Redis cannot be reached (password redacted).
            CorruptRecordError: a stored record cannot be decoded.
        """
        check_key(key)
        names = self.layout.key(key)
        client = await self._redis.ready()
        raw = cast(dict[bytes, bytes], await client.hgetall(names.records))
        records = sorted((decode_record(*entry(value)) for value in raw.values()), key=_seq)
        return [r for r in records if kind is None or r.kind == kind]

    # --- RetentionStorage ----------------------------------------------------------------

    async def purge(self, *, now: datetime | None = None) -> int:
        """Always 0: Redis has no ``retention`` period; its ``ttl`` option does the work.

        With ``ttl``, every key of a session expires ``ttl`` after the session's last write
        (the server deletes it, checkpoint and records included), so there is nothing for a
        purge to delete; without it, messages are kept until deleted.

        Raises:
            InvalidArgumentError: ``now`` is not a timezone-aware datetime.
        """
        check_now(now)
        return 0


def _seq(record: ConversationRecord) -> int:
    return record.seq

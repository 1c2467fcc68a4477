"""``memory://``: conversations in process memory (tests, caches, short-lived workers).

The reference implementation of every ability (``storage.abilities``): the other stores are
compared to it by the conformance kit (:mod:`storage.testing`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any, Self

import attrs

from storage.abilities import (
    ConversationRecord,
    Head,
    SearchHit,
    SessionInfo,
    SessionPage,
    SummaryCheckpoint,
    Tail,
    encode_session_cursor,
)
from storage.durations import Duration, parse_duration
from storage.errors import ConfigError, ConflictError, StorageUnavailableError
from storage.history import prepare_batch, safe_window, validate_history, whole_tool_groups
from storage.message import ChatKey, ChatMessage, check_key_part
from storage.search import scan_search
from storage.stores.base import BaseStore, SessionRow, check_key
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
from storage.stores.urls import check_query

__all__ = ["InMemoryChatStorage"]

_EMPTY_HEAD = Head(0, "", 0)


def _new_epoch() -> str:
    return uuid.uuid4().hex[:16]


def _us(moment: datetime) -> int:
    """Microseconds since the Unix epoch (the unit of session cursors)."""
    return int(moment.astimezone(UTC).timestamp() * 1_000_000)


class _Conversation:
    """One key's record: messages with their sequence numbers, epoch, checkpoint, records."""

    __slots__ = ("checkpoint", "epoch", "ids", "messages", "record_ids", "records", "seqs")

    def __init__(self) -> None:
        self.messages: list[ChatMessage] = []
        self.seqs: list[int] = []
        self.ids: set[str] = set()
        self.epoch = ""  # set when the first message is stored
        self.checkpoint: SummaryCheckpoint | None = None
        self.records: list[ConversationRecord] = []
        self.record_ids: set[str] = set()

    def head(self) -> Head:
        if not self.messages:
            return _EMPTY_HEAD
        version = self.checkpoint.version if self.checkpoint is not None else 0
        return Head(self.seqs[-1], self.epoch, version)

    def reset(self, messages: list[ChatMessage], seqs: list[int]) -> None:
        """Start a new epoch holding ``messages`` (the checkpoint is void)."""
        self.messages = messages
        self.seqs = seqs
        self.ids = {m.id for m in messages}
        self.epoch = _new_epoch() if messages else ""
        self.checkpoint = None


class InMemoryChatStorage(BaseStore):
    """Conversations in nested dicts (user → session → agent), lost when the process ends.

    Messages are immutable, so storing and returning them needs no deep copy; every returned
    list is new. No call awaits anything while it reads or changes the dicts, so each call
    is atomic under any number of concurrent tasks.

    Implements every ability of :mod:`storage.abilities`: sequence numbers and heads,
    summary checkpoints (compare-and-set) and leases, replace and conditional saves, session
    listing, scan search (:func:`storage.search.scan_search`), records, and retention.

    Args:
        retention: messages older than this (seconds, or a duration such as ``"30d"``,
            :func:`storage.durations.parse_duration`) are deleted by :meth:`purge`;
            ``None`` (default): kept forever.
        purge_interval: with ``retention``, writes run a purge at most once per this many
            seconds (or a duration string); default one hour.
        clock: the time in seconds since the Unix epoch (default ``time.time``): lease
            expiry, the retention cut-off and the purge interval all read it, so a test can
            inject a fake clock.

    Raises:
        InvalidArgumentError: a bad ``retention`` or ``purge_interval``.
        StorageUnavailableError: any call after ``aclose``.
    """

    scheme = "memory"
    has_driver = False  # nothing to translate: ability methods stay unwrapped

    def __init__(
        self,
        *,
        retention: Duration | None = None,
        purge_interval: Duration = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._users: dict[str, dict[str, dict[str, _Conversation]]] = {}
        # A session's last activity (its listing order): the newest ``created_at`` saved to
        # it while it held messages; deleting some of them does not lower it.
        self._activity: dict[tuple[str, str], datetime] = {}
        self._leases: dict[ChatKey, tuple[str, float]] = {}
        self._seq = count(1)
        self.retention = parse_duration(retention) if retention is not None else None
        self.purge_interval = parse_duration(purge_interval)
        self._clock = clock
        self._last_purge: float | None = None

    @classmethod
    def from_url(cls, url: str, **options: Any) -> Self:
        """``memory://`` (``memory://?retention=30d``): no location.

        Raises:
            ConfigError: a location, or a query option the constructor does not take.
        """
        _, sep, rest = url.partition("://")
        if not sep:
            raise ConfigError(f"store 'memory': {url!r} is not a memory:// URL")
        if rest.partition("?")[0].strip("/"):
            raise ConfigError(f"store 'memory': memory:// takes no location, got {url!r}")
        check_query(url, "memory", options)
        store = cls(**options)
        store.display_url = url.partition("?")[0]
        return store

    # --- internals -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StorageUnavailableError(f"{self.describe()}: the store is closed")

    def _conversation(self, key: ChatKey) -> _Conversation | None:
        sessions = self._users.get(key.user_id)
        if sessions is None:
            return None
        agents = sessions.get(key.session_id)
        if agents is None:
            return None
        return agents.get(key.agent_id)

    def _conversation_for_write(self, key: ChatKey) -> _Conversation:
        conversation = self._conversation(key)
        if conversation is None:
            conversation = (
                self._users.setdefault(key.user_id, {})
                .setdefault(key.session_id, {})
                .setdefault(key.agent_id, _Conversation())
            )
        return conversation

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    def _append(self, key: ChatKey, batch: list[ChatMessage]) -> list[ChatMessage]:
        conversation = self._conversation_for_write(key)
        stored = [m for m in batch if m.id not in conversation.ids]
        if stored and not conversation.messages:
            conversation.epoch = _new_epoch()
        for message in stored:
            conversation.messages.append(message)
            conversation.seqs.append(next(self._seq))
            conversation.ids.add(message.id)
        self._touch(key, stored)
        return stored

    def _touch(self, key: ChatKey, stored: list[ChatMessage]) -> None:
        """Raise the session's last activity to the newest of ``stored``."""
        if not stored:
            return
        newest = max(m.created_at for m in stored if m.created_at is not None)
        session = (key.user_id, key.session_id)
        known = self._activity.get(session)
        if known is None or newest > known:
            self._activity[session] = newest

    def _forget_idle(self, user_id: str, session_id: str) -> None:
        """Forget the last activity of a session that holds no message any more."""
        agents = self._users.get(user_id, {}).get(session_id, {})
        if not any(c.messages for c in agents.values()):
            self._activity.pop((user_id, session_id), None)

    def _maybe_purge(self) -> None:
        """Purge at most once per ``purge_interval`` (called on writes)."""
        if self.retention is None:
            return
        now = self._clock()
        if self._last_purge is not None and now - self._last_purge < self.purge_interval:
            return
        self._purge(datetime.fromtimestamp(now, UTC))

    def _purge(self, now: datetime) -> int:
        assert self.retention is not None
        self._last_purge = now.timestamp()
        cutoff = now - timedelta(seconds=self.retention)
        removed = 0
        for user_id, sessions in self._users.items():
            for session_id, agents in sessions.items():
                for conversation in agents.values():
                    old = [
                        m.created_at is None or m.created_at < cutoff for m in conversation.messages
                    ]
                    if not any(old):
                        continue
                    # Tool groups go whole: never a result without its call (or the reverse).
                    drop, _ = whole_tool_groups(conversation.messages, old)
                    keep = [i for i, gone in enumerate(drop) if not gone]
                    removed += len(conversation.messages) - len(keep)
                    conversation.reset(
                        [conversation.messages[i] for i in keep],
                        [conversation.seqs[i] for i in keep],
                    )
                self._forget_idle(user_id, session_id)
        if removed:
            self._drop_all_empty()
        return removed

    def _drop_all_empty(self) -> None:
        for user_id in list(self._users):
            sessions = self._users[user_id]
            for session_id in list(sessions):
                agents = sessions[session_id]
                for agent_id in [a for a, c in agents.items() if not c.messages and not c.records]:
                    del agents[agent_id]
                if not agents:
                    del sessions[session_id]
            if not sessions:
                del self._users[user_id]

    def _drop_empty(self, key: ChatKey) -> None:
        sessions = self._users.get(key.user_id, {})
        agents = sessions.get(key.session_id, {})
        conversation = agents.get(key.agent_id)
        if conversation is not None and not conversation.messages and not conversation.records:
            del agents[key.agent_id]
        if not agents:
            sessions.pop(key.session_id, None)
        if not sessions:
            self._users.pop(key.user_id, None)

    # --- BaseStore hooks -----------------------------------------------------------------

    async def _save(self, key: ChatKey, batch: list[ChatMessage]) -> list[ChatMessage]:
        self._check_open()
        stored = self._append(key, batch)
        self._maybe_purge()
        return stored

    async def _fetch(self, key: ChatKey, limit: int | None) -> list[ChatMessage]:
        self._check_open()
        conversation = self._conversation(key)
        if conversation is None:
            return []
        return safe_window(conversation.messages, limit)

    async def _session_rows(self, user_id: str, session_id: str) -> Iterable[SessionRow]:
        self._check_open()
        agents = self._users.get(user_id, {}).get(session_id, {})
        return [
            (message.created_at or datetime.min.replace(tzinfo=UTC), seq, agent_id, message)
            for agent_id, conversation in agents.items()
            for message, seq in zip(conversation.messages, conversation.seqs, strict=True)
        ]

    async def _delete(self, key: ChatKey) -> None:
        self._check_open()
        self._leases.pop(key, None)
        agents = self._users.get(key.user_id, {}).get(key.session_id)
        if agents is None:
            return
        agents.pop(key.agent_id, None)
        self._drop_empty(key)
        self._forget_idle(key.user_id, key.session_id)

    async def _delete_user(self, user_id: str) -> None:
        self._check_open()
        self._users.pop(user_id, None)
        for session in [s for s in self._activity if s[0] == user_id]:
            del self._activity[session]
        for key in [k for k in self._leases if k.user_id == user_id]:
            del self._leases[key]

    async def _list_keys(self, user_id: str | None, session_id: str | None) -> Iterable[ChatKey]:
        self._check_open()
        return [
            ChatKey(user, session, agent)
            for user, sessions in self._users.items()
            if user_id is None or user == user_id
            for session, agents in sessions.items()
            if session_id is None or session == session_id
            for agent, conversation in agents.items()
            if conversation.messages
        ]

    def _describe_options(self) -> str:
        if self.retention is None:
            return ""
        return f"retention={self.retention:g}s"

    # --- SequencedStorage ----------------------------------------------------------------

    async def head(self, key: ChatKey) -> Head:
        """The key's head (``Head(0, "", 0)`` when it holds no message).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            StorageUnavailableError: the store is closed.
        """
        check_key(key)
        self._check_open()
        conversation = self._conversation(key)
        return conversation.head() if conversation is not None else _EMPTY_HEAD

    async def fetch_since(self, key: ChatKey, after: int) -> Tail:
        """Raw messages with ``seq > after`` and the head, in one snapshot.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidArgumentError: ``after`` is not an int >= 0.
            StorageUnavailableError: the store is closed.
        """
        check_key(key)
        check_after(after)
        self._check_open()
        conversation = self._conversation(key)
        if conversation is None or not conversation.messages:
            return Tail(_EMPTY_HEAD, (), ())
        seqs = conversation.seqs
        # seqs are increasing: find the first one above ``after`` from the end (tails are short).
        start = len(seqs)
        while start > 0 and seqs[start - 1] > after:
            start -= 1
        return Tail(conversation.head(), tuple(seqs[start:]), tuple(conversation.messages[start:]))

    # --- CheckpointStorage ---------------------------------------------------------------

    async def load_checkpoint(self, key: ChatKey) -> SummaryCheckpoint | None:
        """The key's checkpoint, or ``None`` (none, or made under another epoch).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            StorageUnavailableError: the store is closed.
        """
        check_key(key)
        self._check_open()
        conversation = self._conversation(key)
        if conversation is None or conversation.checkpoint is None:
            return None
        if conversation.checkpoint.epoch != conversation.epoch:
            return None
        return conversation.checkpoint

    async def save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, *, expected_version: int
    ) -> SummaryCheckpoint | None:
        """Compare-and-set the key's checkpoint (see ``CheckpointStorage.save_checkpoint``).

        Returns:
            The checkpoint stored as version ``expected_version + 1``, or ``None`` when the
            current version is not ``expected_version``, the epoch is not the key's current
            one, or ``covers_to`` is not the sequence number of a message the key holds.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidArgumentError: a bad ``expected_version`` or checkpoint field.
            InvalidMessageError: a checkpoint message is invalid or not marked as a summary.
            StorageUnavailableError: the store is closed.
        """
        check_key(key)
        check_expected_version(expected_version)
        checkpoint = check_checkpoint(checkpoint)
        self._check_open()
        conversation = self._conversation(key)
        if conversation is None or not conversation.messages:
            return None
        current = conversation.checkpoint.version if conversation.checkpoint is not None else 0
        if current != expected_version or checkpoint.epoch != conversation.epoch:
            return None
        if checkpoint.covers_to not in conversation.seqs:
            return None
        stored = attrs.evolve(checkpoint, version=expected_version + 1)
        conversation.checkpoint = stored
        return stored

    async def acquire_lease(self, key: ChatKey, owner: str, ttl: float) -> bool:
        """Take (or extend) the key's summarizing lease for ``ttl`` seconds of the clock.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidArgumentError: ``owner`` empty or ``ttl`` not > 0.
            StorageUnavailableError: the store is closed.
        """
        check_key(key)
        seconds = check_lease(owner, ttl)
        self._check_open()
        now = self._clock()
        held = self._leases.get(key)
        if held is not None and held[0] != owner and held[1] > now:
            return False
        self._leases[key] = (owner, now + seconds)
        return True

    async def release_lease(self, key: ChatKey, owner: str) -> None:
        """Give the lease back if ``owner`` holds it.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            StorageUnavailableError: the store is closed.
        """
        check_key(key)
        self._check_open()
        held = self._leases.get(key)
        if held is not None and held[0] == owner:
            del self._leases[key]

    # --- ReplaceableStorage --------------------------------------------------------------

    async def replace(self, key: ChatKey, messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        """Replace the key's messages with ``messages`` in a new epoch; the checkpoint goes.

        Records stay (they are not messages). Returns the messages as stored.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidMessageError: ``messages`` is not a valid history (nothing changed).
            StorageUnavailableError: the store is closed.
        """
        check_key(key)
        batch = prepare_batch(validate_history(list(messages), system="anywhere"))
        self._check_open()
        conversation = self._conversation_for_write(key)
        conversation.reset(batch, [next(self._seq) for _ in batch])
        self._drop_empty(key)
        self._forget_idle(key.user_id, key.session_id)
        self._touch(key, batch)
        return list(batch)

    async def save_messages_if(
        self, key: ChatKey, messages: Sequence[ChatMessage], *, expected_version: str
    ) -> list[ChatMessage]:
        """``save_messages`` only if ``head(key).version == expected_version``.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidMessageError: a message breaks a rule (nothing stored).
            ConflictError: the key's version is not ``expected_version`` (nothing stored).
            StorageUnavailableError: the store is closed.
        """
        check_key(key)
        batch = prepare_batch(messages)
        self._check_open()
        conversation = self._conversation(key)
        version = (conversation.head() if conversation is not None else _EMPTY_HEAD).version
        if version != expected_version:
            raise ConflictError(
                f"{key}: version is {version!r}, not {expected_version!r}; nothing stored"
            )
        if not batch:
            return []
        stored = self._append(key, batch)
        self._maybe_purge()
        return stored

    # --- SessionListing ------------------------------------------------------------------

    async def list_sessions(
        self, user_id: str, *, limit: int = 50, cursor: str | None = None
    ) -> SessionPage:
        """The user's sessions, newest ``last_at`` first, ties by ``session_id`` ascending.

        ``last_at`` is the session's last activity: the newest ``created_at`` saved to it
        while it held messages. Deleting some of them (an agent's conversation, a purge) does
        not lower it, so a session never moves behind a cursor that already passed it.

        Raises:
            InvalidKeyError: ``user_id`` is not a valid key part.
            InvalidArgumentError: ``limit`` < 1 or a malformed ``cursor``.
            StorageUnavailableError: the store is closed.
        """
        check_key_part("user_id", user_id)
        check_page_limit(limit)
        after = check_cursor(cursor)
        self._check_open()
        rows: list[tuple[int, SessionInfo]] = []
        for session_id, agents in self._users.get(user_id, {}).items():
            times = [
                m.created_at
                for conversation in agents.values()
                for m in conversation.messages
                if m.created_at is not None
            ]
            if not times:
                continue
            newest = max(times)
            active = self._activity.get((user_id, session_id))
            info = SessionInfo(
                session_id,
                tuple(sorted(a for a, c in agents.items() if c.messages)),
                len(times),
                min(times),
                active if active is not None and active > newest else newest,
            )
            rows.append((_us(info.last_at), info))
        rows.sort(key=lambda row: (-row[0], row[1].session_id))
        if after is not None:
            rows = [r for r in rows if (-r[0], r[1].session_id) > (-after[0], after[1])]
        page = rows[:limit]
        next_cursor = None
        if len(rows) > limit:
            last = page[-1][1]
            next_cursor = encode_session_cursor(last.last_at, last.session_id)
        return SessionPage(tuple(info for _, info in page), next_cursor)

    # --- SearchableStorage ---------------------------------------------------------------

    async def search(self, user_id: str, query: str, *, limit: int = 20) -> list[SearchHit]:
        """The user's messages matching ``query``, best first (a scan; see
        :func:`storage.search.scan_search`).

        Raises:
            InvalidKeyError: ``user_id`` is not a valid key part.
            InvalidArgumentError: a query without words, or ``limit`` < 1.
            StorageUnavailableError: the store is closed.
        """
        check_key_part("user_id", user_id)
        self._check_open()
        items = [
            (ChatKey(user_id, session_id, agent_id), message)
            for session_id, agents in self._users.get(user_id, {}).items()
            for agent_id, conversation in agents.items()
            for message in conversation.messages
        ]
        return scan_search(query, items, limit=limit)

    # --- RecordStorage -------------------------------------------------------------------

    async def save_record(self, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
        """Store ``record`` (a no-op returning the stored one when its id is stored already).

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            InvalidArgumentError: empty ``kind`` or data that is not JSON-like.
            StorageUnavailableError: the store is closed.
        """
        check_key(key)
        check_record(record)
        self._check_open()
        conversation = self._conversation_for_write(key)
        if record.id in conversation.record_ids:
            return next(r for r in conversation.records if r.id == record.id)
        created = record.created_at.astimezone(UTC) if record.created_at else self._now()
        stored = attrs.evolve(record, created_at=created, seq=next(self._seq))
        conversation.records.append(stored)
        conversation.record_ids.add(stored.id)
        return stored

    async def fetch_records(
        self, key: ChatKey, *, kind: str | None = None
    ) -> list[ConversationRecord]:
        """The key's records in store order, optionally of one ``kind``.

        Raises:
            InvalidKeyError: ``key`` is not a ``ChatKey``.
            StorageUnavailableError: the store is closed.
        """
        check_key(key)
        self._check_open()
        conversation = self._conversation(key)
        if conversation is None:
            return []
        return [r for r in conversation.records if kind is None or r.kind == kind]

    # --- RetentionStorage ----------------------------------------------------------------

    async def purge(self, *, now: datetime | None = None) -> int:
        """Delete messages older than ``now - retention`` (``now`` default: the clock) and
        the checkpoints of their keys (a new epoch starts for each key touched).

        Returns:
            How many messages were deleted (0 without ``retention``).

        Raises:
            InvalidArgumentError: ``now`` is not a timezone-aware datetime.
            StorageUnavailableError: the store is closed.
        """
        moment = check_now(now)
        self._check_open()
        if self.retention is None:
            return 0
        return self._purge(moment if moment is not None else self._now())

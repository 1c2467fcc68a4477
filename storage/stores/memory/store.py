"""``InMemoryChatStorage``: the reference store, every hook a plain function (nothing waits)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from itertools import count
from typing import Any, Self

import attrs

from storage.abilities import (
    ConversationRecord,
    Head,
    Rewind,
    SearchHit,
    SessionPage,
    SummaryCheckpoint,
    Tail,
    Timeline,
    mark_rewound,
)
from storage.durations import (
    Duration,
    PositiveDuration,
    parse_duration,
    parse_positive_duration,
    short_duration,
)
from storage.errors import ConfigError
from storage.history import safe_window
from storage.message import ChatKey, ChatMessage
from storage.search import scan_search
from storage.stores.base import (
    EMPTY_HEAD,
    BaseStore,
    SessionRow,
    conflict,
    not_in_view,
    page_of,
)
from storage.stores.epochs import new_epoch
from storage.stores.memory import retention
from storage.stores.memory.conversation import Conversation, Users, drop_empty, find
from storage.stores.memory.sessions import session_infos, walk_positions
from storage.stores.times import Clock, to_us
from storage.stores.urls import check_query

__all__ = ["InMemoryChatStorage"]

_OLDEST = datetime.min.replace(tzinfo=UTC)


class InMemoryChatStorage(BaseStore):
    """Conversations in nested dicts (user → session → agent), lost when the process ends.

    Messages are immutable, so storing and returning them needs no deep copy; every returned
    list is new. No call awaits anything while it reads or changes the dicts, so each call
    is atomic under any number of concurrent tasks.

    Implements every ability of :mod:`storage.abilities`: sequence numbers and heads,
    summary checkpoints (compare-and-set) and leases, replace (compare-and-replace) and
    conditional saves, session listing, scan search (:func:`storage.search.scan_search`),
    records, and retention.

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
    url_driver_options = False  # every query option is its own: a stray one is a mistake

    def __init__(
        self,
        *,
        retention: PositiveDuration | None = None,
        purge_interval: Duration = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._users: Users = {}
        # A session's last activity (its listing order): the newest ``created_at`` saved to
        # it while it held messages; deleting some of them does not lower it.
        self._activity: dict[tuple[str, str], datetime] = {}
        self._leases: dict[ChatKey, tuple[str, float]] = {}
        self._seq = count(1)
        self.retention = parse_positive_duration(retention) if retention is not None else None
        self.purge_interval = parse_duration(purge_interval)
        self._clock: Clock = clock

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

    def _describe_options(self) -> str:
        return "" if self.retention is None else f"retention={short_duration(self.retention)}"

    # --- internals -----------------------------------------------------------------------

    def _conversation_for_write(self, key: ChatKey) -> Conversation:
        conversation = find(self._users, key)
        if conversation is None:
            conversation = (
                self._users.setdefault(key.user_id, {})
                .setdefault(key.session_id, {})
                .setdefault(key.agent_id, Conversation())
            )
        return conversation

    def _version(self, key: ChatKey) -> str:
        conversation = find(self._users, key)
        return (conversation.head() if conversation is not None else EMPTY_HEAD).version

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

    # --- ChatStorage hooks ---------------------------------------------------------------

    def _save(self, key: ChatKey, batch: list[ChatMessage]) -> list[ChatMessage]:
        conversation = self._conversation_for_write(key)
        stored = [m for m in batch if m.id not in conversation.ids]
        if stored and not conversation.messages:
            conversation.epoch = new_epoch()
        for message in stored:
            conversation.append(message, next(self._seq))
        self._touch(key, stored)
        return stored

    def _fetch(self, key: ChatKey, limit: int | None) -> list[ChatMessage]:
        conversation = find(self._users, key)
        return [] if conversation is None else safe_window(conversation.view, limit)

    def _session_rows(self, user_id: str, session_id: str) -> list[SessionRow]:
        agents = self._users.get(user_id, {}).get(session_id, {})
        return [
            (
                message.created_at or _OLDEST,
                seq,
                agent_id,
                mark_rewound(message, conversation.hidden[seq])
                if seq in conversation.hidden
                else message,
            )
            for agent_id, conversation in agents.items()
            for message, seq in zip(conversation.messages, conversation.seqs, strict=True)
        ]

    def _delete(self, key: ChatKey) -> None:
        self._leases.pop(key, None)
        agents = self._users.get(key.user_id, {}).get(key.session_id)
        if agents is None:
            return
        agents.pop(key.agent_id, None)
        drop_empty(self._users, key)
        self._forget_idle(key.user_id, key.session_id)

    def _delete_user(self, user_id: str) -> None:
        self._users.pop(user_id, None)
        for session in [s for s in self._activity if s[0] == user_id]:
            del self._activity[session]
        for key in [k for k in self._leases if k.user_id == user_id]:
            del self._leases[key]

    def _list_keys(self, user_id: str | None, session_id: str | None) -> Iterable[ChatKey]:
        return [
            ChatKey(user, session, agent)
            for user, sessions in self._users.items()
            if user_id is None or user == user_id
            for session, agents in sessions.items()
            if session_id is None or session == session_id
            for agent, conversation in agents.items()
            if conversation.messages
        ]

    # --- abilities -----------------------------------------------------------------------

    def _head(self, key: ChatKey) -> Head:
        conversation = find(self._users, key)
        return conversation.head() if conversation is not None else EMPTY_HEAD

    def _fetch_since(self, key: ChatKey, after: int) -> Tail:
        conversation = find(self._users, key)
        if conversation is None or not conversation.messages:
            return Tail(EMPTY_HEAD, (), ())
        seqs = conversation.view_seqs
        # seqs are increasing: find the first one above ``after`` from the end (tails are short).
        start = len(seqs)
        while start > 0 and seqs[start - 1] > after:
            start -= 1
        return Tail(conversation.head(), tuple(seqs[start:]), tuple(conversation.view[start:]))

    def _load_checkpoint(self, key: ChatKey) -> SummaryCheckpoint | None:
        conversation = find(self._users, key)
        if conversation is None or conversation.checkpoint is None:
            return None
        if conversation.checkpoint.epoch != conversation.epoch:
            return None
        return conversation.checkpoint

    def _save_checkpoint(
        self, key: ChatKey, checkpoint: SummaryCheckpoint, expected_version: int
    ) -> SummaryCheckpoint | None:
        conversation = find(self._users, key)
        if conversation is None or not conversation.messages:
            return None
        current = conversation.checkpoint.version if conversation.checkpoint is not None else 0
        if current != expected_version or checkpoint.epoch != conversation.epoch:
            return None
        if checkpoint.covers_to not in conversation.view_seqs:
            return None
        stored = attrs.evolve(checkpoint, version=expected_version + 1)
        conversation.store_checkpoint(stored)
        return stored

    def _checkpoint_version(self, key: ChatKey, version: int) -> SummaryCheckpoint | None:
        conversation = find(self._users, key)
        return None if conversation is None else conversation.versions.get(version)

    def _acquire_lease(self, key: ChatKey, owner: str, ttl: float) -> bool:
        now = self._clock()
        held = self._leases.get(key)
        if held is not None and held[0] != owner and held[1] > now:
            return False
        self._leases[key] = (owner, now + ttl)
        return True

    def _release_lease(self, key: ChatKey, owner: str) -> None:
        held = self._leases.get(key)
        if held is not None and held[0] == owner:
            del self._leases[key]

    def _replace(
        self, key: ChatKey, batch: list[ChatMessage], expected_version: str | None
    ) -> list[ChatMessage]:
        if expected_version is not None:
            version = self._version(key)
            if version != expected_version:
                raise conflict(key, expected_version, version)
        conversation = self._conversation_for_write(key)
        conversation.reset(batch, [next(self._seq) for _ in batch])
        drop_empty(self._users, key)
        self._forget_idle(key.user_id, key.session_id)
        self._touch(key, batch)
        return list(batch)

    def _save_messages_if(
        self, key: ChatKey, batch: list[ChatMessage], expected_version: str
    ) -> list[ChatMessage]:
        version = self._version(key)
        if version != expected_version:
            raise conflict(key, expected_version, version)
        return self._save(key, batch) if batch else []

    def _list_sessions(
        self, user_id: str, limit: int, after: tuple[int, str] | None, bound: int | None
    ) -> SessionPage:
        sessions = self._users.get(user_id, {})
        infos = session_infos(user_id, sessions, self._activity)
        position = None
        if bound is not None:
            moved = [s for s in infos if to_us(s.last_at) > bound]
            position = walk_positions(user_id, sessions, self._activity, moved, bound)
        return page_of(infos, limit, after, bound, position)

    def _search(self, user_id: str, query: str, terms: list[str], limit: int) -> list[SearchHit]:
        items = [
            (ChatKey(user_id, session_id, agent_id), message)
            for session_id, agents in self._users.get(user_id, {}).items()
            for agent_id, conversation in agents.items()
            for message in conversation.messages
        ]
        return scan_search(query, items, limit=limit)

    def _save_record(self, key: ChatKey, record: ConversationRecord) -> ConversationRecord:
        conversation = self._conversation_for_write(key)
        if record.id in conversation.record_ids:
            return next(r for r in conversation.records if r.id == record.id)
        stored = attrs.evolve(record, seq=next(self._seq))
        conversation.records.append(stored)
        conversation.record_ids.add(stored.id)
        return stored

    def _fetch_records(self, key: ChatKey, kind: str | None) -> list[ConversationRecord]:
        conversation = find(self._users, key)
        if conversation is None:
            return []
        return [r for r in conversation.records if kind is None or r.kind == kind]

    def _timeline(self, key: ChatKey) -> Timeline:
        conversation = find(self._users, key)
        if conversation is None or not conversation.messages:
            return Timeline(EMPTY_HEAD, (), ())
        return Timeline(
            conversation.head(), conversation.seqs, conversation.messages, conversation.rewinds
        )

    def _rewind(self, key: ChatKey, to: str, rewind_id: str, now: datetime) -> int:
        conversation = find(self._users, key)
        view = conversation.view if conversation is not None else []
        at = next((i for i, m in enumerate(view) if m.id == to), None)
        if conversation is None or at is None:
            raise not_in_view(key, to)
        seqs = conversation.view_seqs
        hidden = seqs[at + 1 :]
        if not hidden:
            return 0
        rewind = Rewind(to, seqs[at], hidden[-1], len(hidden), now, next(self._seq), rewind_id)
        old_epoch = conversation.epoch
        conversation.hide(rewind, hidden)
        conversation.epoch = new_epoch()
        checkpoint = conversation.checkpoint
        if (
            checkpoint is not None
            and checkpoint.epoch == old_epoch
            and checkpoint.covers_to <= seqs[at]
        ):
            conversation.store_checkpoint(
                attrs.evolve(checkpoint, epoch=conversation.epoch, version=checkpoint.version + 1)
            )
        return len(hidden)

    def _purge(self, cutoff: datetime) -> int:
        removed = retention.purge(self._users, cutoff, self._forget_idle)
        if removed:
            drop_empty(self._users)
        return removed

"""``memory://``: conversations in process memory (tests, caches, short-lived workers)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import count

from storage.history import prepare_batch, safe_window
from storage.message import AgentMessage, ChatKey, ChatMessage, check_key_part
from storage.protocol import AsyncContextMixin

__all__ = ["InMemoryChatStorage"]


class _Conversation:
    __slots__ = ("ids", "messages", "seqs")

    def __init__(self) -> None:
        self.messages: list[ChatMessage] = []
        self.seqs: list[int] = []
        self.ids: set[str] = set()


class InMemoryChatStorage(AsyncContextMixin):
    """Conversations in nested dicts (user → session → agent), lost when the process ends.

    Messages are immutable, so storing and returning them needs no deep copy; every returned
    list is new. No I/O and no awaits inside a call, so each call is atomic under any number of
    concurrent tasks.
    """

    def __init__(self) -> None:
        self._users: dict[str, dict[str, dict[str, _Conversation]]] = {}
        self._seq = count(1)

    def _conversation(self, key: ChatKey) -> _Conversation | None:
        sessions = self._users.get(key.user_id)
        if sessions is None:
            return None
        agents = sessions.get(key.session_id)
        if agents is None:
            return None
        return agents.get(key.agent_id)

    async def save(self, key: ChatKey, message: ChatMessage) -> list[ChatMessage]:
        return await self.save_messages(key, [message])

    async def save_messages(
        self, key: ChatKey, messages: Sequence[ChatMessage]
    ) -> list[ChatMessage]:
        batch = prepare_batch(messages)
        if not batch:
            return []
        conversation = self._conversation(key)
        if conversation is None:
            conversation = (
                self._users.setdefault(key.user_id, {})
                .setdefault(key.session_id, {})
                .setdefault(key.agent_id, _Conversation())
            )
        stored = [m for m in batch if m.id not in conversation.ids]
        for message in stored:
            conversation.messages.append(message)
            conversation.seqs.append(next(self._seq))
            conversation.ids.add(message.id)
        return stored

    async def fetch(self, key: ChatKey, *, limit: int | None = None) -> list[ChatMessage]:
        conversation = self._conversation(key)
        if conversation is None:
            return safe_window((), limit)
        return safe_window(conversation.messages, limit)

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[AgentMessage]:
        check_key_part("user_id", user_id)
        check_key_part("session_id", session_id)
        agents = self._users.get(user_id, {}).get(session_id, {})
        rows = [
            (message.created_at, seq, agent_id, message)
            for agent_id, conversation in agents.items()
            for message, seq in zip(conversation.messages, conversation.seqs, strict=True)
        ]
        rows.sort(key=lambda row: (row[0], row[1]))
        return [AgentMessage(agent_id, message) for _, _, agent_id, message in rows]

    async def delete(self, key: ChatKey) -> None:
        sessions = self._users.get(key.user_id)
        if sessions is None:
            return
        agents = sessions.get(key.session_id)
        if agents is None:
            return
        agents.pop(key.agent_id, None)
        if not agents:
            del sessions[key.session_id]
        if not sessions:
            del self._users[key.user_id]

    async def delete_user(self, user_id: str) -> None:
        check_key_part("user_id", user_id)
        self._users.pop(user_id, None)

    async def list_keys(
        self, user_id: str | None = None, session_id: str | None = None
    ) -> list[ChatKey]:
        """Every key holding a message, sorted; optionally one user's and/or one session's."""
        if user_id is not None:
            check_key_part("user_id", user_id)
        if session_id is not None:
            check_key_part("session_id", session_id)
        return sorted(
            (
                ChatKey(user, session, agent)
                for user, sessions in self._users.items()
                if user_id is None or user == user_id
                for session, agents in sessions.items()
                if session_id is None or session == session_id
                for agent, conversation in agents.items()
                if conversation.messages
            ),
            key=lambda k: (k.user_id, k.session_id, k.agent_id),
        )

    async def aclose(self) -> None:
        return None

    def describe(self) -> str:
        return "memory://"

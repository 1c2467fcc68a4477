"""One key's record in the memory store, and the nested dicts that hold every key."""

from __future__ import annotations

from storage.abilities import ConversationRecord, Head, SummaryCheckpoint
from storage.message import ChatKey, ChatMessage
from storage.stores.base import EMPTY_HEAD
from storage.stores.epochs import new_epoch

__all__ = ["Conversation", "Users", "drop_empty", "find"]


class Conversation:
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
            return EMPTY_HEAD
        version = self.checkpoint.version if self.checkpoint is not None else 0
        return Head(self.seqs[-1], self.epoch, version)

    def reset(self, messages: list[ChatMessage], seqs: list[int]) -> None:
        """Start a new epoch holding ``messages`` (the checkpoint is void)."""
        self.messages = messages
        self.seqs = seqs
        self.ids = {m.id for m in messages}
        self.epoch = new_epoch() if messages else ""
        self.checkpoint = None


#: user → session → agent → conversation.
Users = dict[str, dict[str, dict[str, Conversation]]]


def find(users: Users, key: ChatKey) -> Conversation | None:
    """The key's conversation, or ``None``."""
    sessions = users.get(key.user_id)
    if sessions is None:
        return None
    agents = sessions.get(key.session_id)
    if agents is None:
        return None
    return agents.get(key.agent_id)


def drop_empty(users: Users, key: ChatKey | None = None) -> None:
    """Forget conversations holding neither messages nor records (the key's, or all)."""
    if key is not None:
        sessions = users.get(key.user_id, {})
        agents = sessions.get(key.session_id, {})
        conversation = agents.get(key.agent_id)
        if conversation is not None and not conversation.messages and not conversation.records:
            del agents[key.agent_id]
        if not agents:
            sessions.pop(key.session_id, None)
        if not sessions:
            users.pop(key.user_id, None)
        return
    for user_id in list(users):
        sessions = users[user_id]
        for session_id in list(sessions):
            agents = sessions[session_id]
            for agent_id in [a for a, c in agents.items() if not c.messages and not c.records]:
                del agents[agent_id]
            if not agents:
                del sessions[session_id]
        if not sessions:
            del users[user_id]

"""One key's record in the memory store, and the nested dicts that hold every key."""

from __future__ import annotations

from storage.abilities import ConversationRecord, Head, Rewind, SummaryCheckpoint
from storage.message import ChatKey, ChatMessage
from storage.stores.base import EMPTY_HEAD
from storage.stores.epochs import new_epoch

__all__ = ["Conversation", "Users", "drop_empty", "find"]


class Conversation:
    """One key's record: messages with their sequence numbers (rewound ones included), its
    rewinds, epoch, checkpoint (and every kept version of it), records.

    ``view`` and ``view_seqs`` are the messages ``fetch`` returns (the record without the
    rewound ones): the record's own lists while nothing is rewound."""

    __slots__ = (
        "_view",
        "checkpoint",
        "epoch",
        "hidden",
        "ids",
        "messages",
        "record_ids",
        "records",
        "rewinds",
        "seqs",
        "versions",
    )

    def __init__(self) -> None:
        self.messages: list[ChatMessage] = []
        self.seqs: list[int] = []
        self.ids: set[str] = set()
        self.epoch = ""  # set when the first message is stored
        self.checkpoint: SummaryCheckpoint | None = None
        self.versions: dict[int, SummaryCheckpoint] = {}
        self.records: list[ConversationRecord] = []
        self.record_ids: set[str] = set()
        self.rewinds: list[Rewind] = []
        self.hidden: dict[int, Rewind] = {}  # seq of a rewound message -> its rewind
        self._view: tuple[list[ChatMessage], list[int]] | None = None

    @property
    def view(self) -> list[ChatMessage]:
        return self._views()[0]

    @property
    def view_seqs(self) -> list[int]:
        return self._views()[1]

    def _views(self) -> tuple[list[ChatMessage], list[int]]:
        if not self.hidden:
            return self.messages, self.seqs
        view = self._view
        if view is None:
            pairs = [(m, s) for m, s in zip(self.messages, self.seqs, strict=True)]
            view = self._view = (
                [m for m, s in pairs if s not in self.hidden],
                [s for _, s in pairs if s not in self.hidden],
            )
        return view

    def append(self, message: ChatMessage, seq: int) -> None:
        """Add a newly saved message (never hidden)."""
        if self.hidden:
            view, seqs = self._views()
            view.append(message)
            seqs.append(seq)
        self.messages.append(message)
        self.seqs.append(seq)
        self.ids.add(message.id)

    def head(self) -> Head:
        if not self.messages:
            return EMPTY_HEAD
        version = self.checkpoint.version if self.checkpoint is not None else 0
        return Head(self.seqs[-1], self.epoch, version)

    def store_checkpoint(self, checkpoint: SummaryCheckpoint) -> None:
        """Make ``checkpoint`` (its version set) the current one, and keep it as a version."""
        self.checkpoint = checkpoint
        self.versions[checkpoint.version] = checkpoint

    def hide(self, rewind: Rewind, seqs: list[int]) -> None:
        """Record ``rewind``, which hides the messages with ``seqs``."""
        self.rewinds.append(rewind)
        for seq in seqs:
            self.hidden[seq] = rewind
        self._view = None

    def reset(self, messages: list[ChatMessage], seqs: list[int]) -> None:
        """Start a new epoch holding ``messages`` (the checkpoint and its versions dropped,
        nothing rewound)."""
        self.messages = messages
        self.seqs = seqs
        self.ids = {m.id for m in messages}
        self.epoch = new_epoch() if messages else ""
        self.checkpoint = None
        self.versions = {}
        self.rewinds = []
        self.hidden = {}
        self._view = None

    def retain(self, keep: list[int]) -> None:
        """Keep only the messages at indexes ``keep`` (a retention purge): a new epoch, the
        checkpoint and its versions dropped; rewinds stay, for the messages left."""
        rewinds, hidden = self.rewinds, self.hidden
        self.reset([self.messages[i] for i in keep], [self.seqs[i] for i in keep])
        if self.messages:
            self.rewinds = rewinds
            self.hidden = {seq: hidden[seq] for seq in self.seqs if seq in hidden}


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

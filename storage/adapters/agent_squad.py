"""agent-squad adapter: any ``ChatStorage`` stack as an agent-squad ``ChatStorage``.

agent-squad (https://github.com/awslabs/agent-squad, formerly multi-agent-orchestrator) keeps
Bedrock-style ``ConversationMessage(role, content=[blocks])`` histories: ``{"text": ...}``,
``{"toolUse": {"toolUseId", "name", "input"}}`` in assistant messages and
``{"toolResult": {"toolUseId", "content": [blocks], "status"?}}`` in user messages.

Mapping to ``ChatMessage`` (lossless, checked by the tests; the converters are in
:mod:`storage.adapters.agent_squad_messages`):

- an assistant message becomes one assistant ``ChatMessage``: its ``toolUse`` blocks become
  ``tool_calls`` (``arguments`` = the ``input`` as JSON), the other blocks its content (one
  plain text block becomes a plain string);
- a user message's ``toolResult`` blocks become ``tool`` messages (one per result, in order),
  its other blocks a user message, so tool calls and results pair up as in OpenAI histories;
- what has no field of its own is kept in ``metadata["agent_squad"]``: the block order when it
  is not the usual one, the group that re-forms one user message, a result's ``status``, and
  ``citations`` (as given). Message text never goes to metadata, so a scrubbing layer sees it.
- a ``toolResult``'s ``{"json": value}`` blocks become text holding the JSON (a tool
  message's output, as chat APIs take it, and what a scrubbing layer scrubs value by value),
  restored as ``{"json": ...}`` blocks; content given as a plain string (agent-squad accepts
  it) is read back as that string;
- blocks that do not have the exact shapes above are kept verbatim as content parts.

Reading back, a summary message (``metadata["chatlayers"]["summary"]``) becomes a ``user``
message, as agent-squad's own summarizer makes it (its conversations only have ``user`` and
``assistant``); when the kept turn opens with a user message, the summary's blocks open that
message instead, so the history alternates user and assistant as Bedrock's Converse API
requires (agent-squad's own summarizer leaves two user messages in a row there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from storage.abilities import ReplaceableStorage, SequencedStorage, find_ability
from storage.adapters import missing_extra
from storage.adapters.agent_squad_messages import (
    META,
    from_chat_messages,
    role_name,
    to_chat_messages,
    with_agent_prefix,
)
from storage.adapters.rewrite import back_off
from storage.errors import ConflictError
from storage.message import ChatKey
from storage.protocol import ChatStorage

try:
    from agent_squad.storage.chat_storage import (  # type: ignore[import-untyped]
        ChatStorage as _AgentSquadChatStorage,
    )
    from agent_squad.types import (  # type: ignore[import-untyped]
        ConversationMessage,
        TimestampedMessage,
    )
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra("agent-squad", "agent-squad", exc) from exc

__all__ = [
    "META",
    "AgentSquadChatStorage",
    "from_chat_messages",
    "to_chat_messages",
]

# How many times save_chat_message re-reads the conversation when another worker wrote to it
# between the role check and the save (each retry means another message was stored).
SAVE_ATTEMPTS: Final = 20


class AgentSquadChatStorage(_AgentSquadChatStorage):  # type: ignore[misc]
    """A chatlayers stack behind agent-squad's ``ChatStorage`` interface.

    Semantics follow agent-squad's ``InMemoryChatStorage``: a message with the same role as
    the conversation's last one is not saved by ``save_chat_message`` (the conversation is
    returned unchanged); ``max_history_size`` keeps the newest messages, rounded down to an
    even number (``ChatStorage.trim_conversation``), but only on what is returned — the stack
    keeps the whole history (trimming it is a layer's job); ``fetch_all_chats`` returns the
    session's raw messages in save order with each assistant text prefixed ``[agent_id]``,
    the view agent-squad's classifiers expect. ``fetch_chat`` returns what the stack's
    ``fetch`` returns (a summarizing stack's buffer).

    Args:
        stack: any ``ChatStorage`` (``summarize::scrub::sqlite`` for example).

    Raises:
        InvalidMessageError: a message cannot be converted or stored (nothing is stored).
        InvalidKeyError: an empty id, or one holding NUL.
        StorageUnavailableError: the stack's backend cannot be reached.
    """

    def __init__(self, stack: ChatStorage) -> None:
        super().__init__()
        self.stack = stack

    async def _read(self, key: ChatKey, max_history_size: int | None) -> list[ConversationMessage]:
        size = None if max_history_size is None else max_history_size - max_history_size % 2
        if size:
            # n + 1 stored messages normally convert to n + 1 agent-squad ones; a user message
            # split into tool results needs a wider window; a short history is read whole.
            for window in (size + 1, 4 * size + 4):
                stored = await self.stack.fetch(key, limit=window)
                recent = from_chat_messages(stored)
                if len(recent) > size:
                    return self.trim_conversation(recent, max_history_size)  # type: ignore[no-any-return]
                if len(stored) < window:
                    break
        history = from_chat_messages(await self.stack.fetch(key))
        return self.trim_conversation(history, max_history_size)  # type: ignore[no-any-return]

    async def save_chat_message(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_message: ConversationMessage | TimestampedMessage,
        max_history_size: int | None = None,
    ) -> list[ConversationMessage]:
        """Save one message unless it repeats the last message's role; return the conversation.

        With a stack that has ``SequencedStorage`` and ``ReplaceableStorage`` (every
        built-in store, through every layer) the check and the save are atomic against other
        workers: of two messages of one role saved at once, one is stored. A save that lost
        the race reads again after a random pause (``storage.adapters.rewrite.pause_bound``:
        below 5 ms, doubling to 200 ms), at most ``SAVE_ATTEMPTS`` times.

        Returns:
            The conversation after the save, trimmed to ``max_history_size``.

        Raises:
            ConflictError: other workers kept writing to the conversation (nothing saved).
        """
        key = ChatKey(user_id, session_id, agent_id)
        messages = to_chat_messages(new_message)
        sequenced = find_ability(self.stack, SequencedStorage)
        replaceable = find_ability(self.stack, ReplaceableStorage)
        for attempt in range(SAVE_ATTEMPTS):
            if attempt:
                await back_off(attempt)  # so workers that collided part, not collide again
            # The role check and the save are one compare-and-append: the save lands only
            # while the record is at the version read before the check, so two workers
            # saving a message of the same role at once never store both.
            version = None
            if sequenced is not None and replaceable is not None:
                version = (await sequenced.head(key)).version
            conversation = await self._read(key, max_history_size)
            if conversation and role_name(conversation[-1].role) == role_name(new_message.role):
                return conversation  # agent-squad drops a consecutive same-role message
            if version is None or replaceable is None:
                await self.stack.save_messages(key, messages)
            else:
                try:
                    await replaceable.save_messages_if(key, messages, expected_version=version)
                except ConflictError:
                    continue  # another worker wrote meanwhile: check its message's role
            return await self._read(key, max_history_size)
        raise ConflictError(
            f"{key}: the conversation changed {SAVE_ATTEMPTS} times while a message was being "
            "saved; nothing was saved"
        )

    async def save_chat_messages(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        new_messages: Sequence[ConversationMessage | TimestampedMessage],
        max_history_size: int | None = None,
    ) -> list[ConversationMessage]:
        """Save several messages in one atomic batch (no role check, as agent-squad does).

        Returns:
            The conversation after the save, trimmed to ``max_history_size``.
        """
        key = ChatKey(user_id, session_id, agent_id)
        batch = [m for message in new_messages for m in to_chat_messages(message)]
        if batch:
            await self.stack.save_messages(key, batch)
        return await self._read(key, max_history_size)

    async def fetch_chat(
        self,
        user_id: str,
        session_id: str,
        agent_id: str,
        max_history_size: int | None = None,
    ) -> list[ConversationMessage]:
        """The agent's conversation as the stack serves it, trimmed to ``max_history_size``."""
        return await self._read(ChatKey(user_id, session_id, agent_id), max_history_size)

    async def fetch_all_chats(self, user_id: str, session_id: str) -> list[ConversationMessage]:
        """Every agent's raw messages of the session in save order, assistant text prefixed
        with ``[agent_id]`` (agent-squad's classifier view)."""
        entries = await self.stack.fetch_all_chats(user_id, session_id)
        out: list[ConversationMessage] = []
        start = 0
        # Convert runs of one agent's consecutive messages, so split messages re-form.
        while start < len(entries):
            agent_id = entries[start].agent_id
            end = start + 1
            while end < len(entries) and entries[end].agent_id == agent_id:
                end += 1
            run = from_chat_messages([e.message for e in entries[start:end]])
            out.extend(with_agent_prefix(m, agent_id) for m in run)
            start = end
        return out

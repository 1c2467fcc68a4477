"""Move and count stored conversations: export to, import from the conversation file format.

Export and statistics read the raw record from the innermost store, which must be able to
list its keys (:class:`storage.abilities.ListableStorage`); import saves each conversation as
one batch through the whole stack (so a scrubbing layer scrubs it). The file format is
:mod:`storage.cli.conversation_file`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TextIO, cast

import attrs

from storage.abilities import ListableStorage, find_ability
from storage.cli.conversation_file import Conversation, conversation_record
from storage.cli.transcript import markdown_conversation
from storage.codec import encode
from storage.config.stack import Stack, describe_lines
from storage.errors import ConfigError, InvalidMessageError
from storage.message import ChatKey, ChatMessage
from storage.migrate.journal import is_reserved
from storage.protocol import ChatStorage

__all__ = [
    "Stats",
    "collect_stats",
    "export_conversations",
    "import_conversations",
    "iter_conversations",
    "record_reader",
    "require_listable",
]


def require_listable(stack: Stack) -> ListableStorage:
    """The component of ``stack`` that can list its keys.

    Raises:
        ConfigError: no component can (the store is named).
    """
    found = find_ability(stack, ListableStorage)
    if found is None:
        raise ConfigError(
            f"this command lists stored conversations, which the store "
            f"{describe_lines(stack)[-1]} cannot do (it does not implement list_keys)"
        )
    return found


def record_reader(stack: Stack) -> ChatStorage:
    """The component that reads the raw record as the stack gives it back: the one below the
    innermost layer that makes a model view (summarizing, strict), so an encrypting layer
    still opens what it sealed (the store alone would give ciphertext); the stack itself when
    no layer makes a view."""
    from storage.layers.strict import StrictViewChatStorage
    from storage.layers.summarizing import SummarizingChatStorage

    parts = stack.components()
    reader: object = stack
    for index, part in enumerate(parts[:-1]):
        if isinstance(part, SummarizingChatStorage | StrictViewChatStorage):
            reader = parts[index + 1]
    return cast(ChatStorage, reader)


async def iter_conversations(
    stack: Stack,
    *,
    user_id: str | None = None,
    session_id: str | None = None,
    as_stored: bool = False,
) -> AsyncIterator[tuple[ChatKey, list[ChatMessage]]]:
    """Every stored conversation's raw record, in key order, as the stack reads it back
    (:func:`record_reader`: opened by an encrypting layer) or, with ``as_stored``, as the
    innermost store holds it; the layers' own bookkeeping (a mirror's marks of what its
    secondary missed) is left out.

    Raises:
        ConfigError: the store cannot list its keys.
        ChatStorageError: from the store (or a layer: a key the keyring lacks).
    """
    keys = await require_listable(stack).list_keys(user_id, session_id)
    reader = stack.base if as_stored else record_reader(stack)
    for key in keys:
        if is_reserved(key.user_id):
            continue
        yield key, await reader.fetch(key)


async def export_conversations(
    stack: Stack,
    out: TextIO,
    *,
    user_id: str | None = None,
    session_id: str | None = None,
    format: str = "jsonl",
    raw: bool = True,
) -> tuple[int, int]:
    """Write every stored conversation to ``out``; return ``(conversations, messages)``.

    Args:
        format: ``"jsonl"`` (one conversation per line, what ``import`` reads), ``"json"``
            (one indented JSON array holding one document per conversation; ``import`` reads
            it too) or ``"md"`` (a readable Markdown transcript).
        raw: the stored record (default) or, when ``False``, what the model sees (a
            summarizing stack's view).

    Raises:
        ConfigError: the store cannot list its keys, or an unknown ``format``.
        ChatStorageError: from the store.
    """
    if format not in ("jsonl", "json", "md"):
        raise ConfigError(f"unknown export format {format!r}: use jsonl, json or md")
    conversations = messages = 0
    view = "raw record" if raw else "model view"
    first = True
    if format == "json":
        out.write("[")
    async for key, history in iter_conversations(stack, user_id=user_id, session_id=session_id):
        if not history:
            continue
        if not raw:
            history = await stack.fetch(key)
        if format == "jsonl":
            out.write(json.dumps(conversation_record(key, history), ensure_ascii=False) + "\n")
        elif format == "json":
            document = json.dumps(conversation_record(key, history), ensure_ascii=False, indent=2)
            out.write(("\n" if first else ",\n") + document)
        else:
            out.write(("" if first else "\n") + markdown_conversation(key, history, view))
        first = False
        conversations += 1
        messages += len(history)
    if format == "json":
        out.write("\n]\n" if not first else "]\n")
    return conversations, messages


async def import_conversations(
    stack: Stack,
    conversations: Sequence[Conversation],
    *,
    on_conversation: Callable[[], None] | None = None,
) -> tuple[int, int]:
    """Save each conversation as one atomic batch; return ``(stored, already present)``.

    Messages already stored (same id) are skipped, so an import can be re-run safely after a
    failure midway.

    Raises:
        InvalidMessageError: a message holds text an encrypting layer sealed (an export read
            past the layer that opens it); nothing is saved.
        ChatStorageError: from the stack (the conversations saved before stay stored).
    """
    _refuse_sealed(conversations)
    stored = skipped = 0
    for conversation in conversations:
        new = await stack.save_messages(conversation.key, conversation.messages)
        stored += len(new)
        skipped += len(conversation.messages) - len(new)
        if on_conversation is not None:
            on_conversation()
    return stored, skipped


def _refuse_sealed(conversations: Sequence[Conversation]) -> None:
    """Refuse ciphertext: saved, it would be stored as text (sealed again by an encrypting
    layer), a conversation that reads as ``ce1:…`` forever."""
    from storage.layers.encrypting.cipher import is_token

    for conversation in conversations:
        for index, message in enumerate(conversation.messages):
            if is_token(message.content):
                raise InvalidMessageError(
                    f"{conversation.where}: message {index} is text sealed by an encrypting "
                    "layer (ce1:…), not a message: export it again through its stack, with the "
                    "keyring and master keys, which opens it (`chatlayers export --url "
                    "'encrypt?keyring=…::…'`); nothing was imported"
                )


@attrs.define
class Stats:
    """What a store holds."""

    users: int = 0
    sessions: int = 0
    agents: int = 0
    conversations: int = 0
    messages: int = 0
    bytes: int = 0


async def collect_stats(stack: Stack, *, user_id: str | None = None) -> Stats:
    """Count users, sessions (per user), agents (distinct ids), conversations, messages and the
    bytes of their records (UTF-8 JSON in the store codec's format).

    Raises:
        ConfigError: the store cannot list its keys.
        ChatStorageError: from the store.
    """
    users: set[str] = set()
    sessions: set[tuple[str, str]] = set()
    agents: set[str] = set()
    stats = Stats()
    async for key, history in iter_conversations(stack, user_id=user_id, as_stored=True):
        if not history:
            continue
        users.add(key.user_id)
        sessions.add((key.user_id, key.session_id))
        agents.add(key.agent_id)
        stats.conversations += 1
        stats.messages += len(history)
        stats.bytes += sum(len(encode(m).encode("utf-8")) for m in history)
    stats.users, stats.sessions, stats.agents = len(users), len(sessions), len(agents)
    return stats

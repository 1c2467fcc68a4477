"""The conversation file format: read by ``replay`` and ``import``, written by ``export``.

JSON lines (or a ``.json`` file holding a list), one conversation per line::

    {"id": "conv-1", "messages": [<OpenAI chat messages>], "metadata": {"user_id": "u1"}}
    {"user_id": "u1", "session_id": "conv-1", "agent_id": "assistant", "messages": [...],
     "chatlayers": {"v": 1, "ids": [...], "created_at": [...], "metadata": [...]}}

The key is ``user_id`` (else ``metadata.user_id``, else the conversation id), ``session_id``
(else ``id``) and ``agent_id`` (else ``"assistant"``). Message ids come from ``chatlayers.ids``,
else from a hash of (conversation id, index), so replaying or importing a file twice stores
nothing new. ``chatlayers.created_at`` holds ISO 8601 times with a timezone (or ``null``).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import attrs

from storage.errors import ConfigError, InvalidKeyError, InvalidMessageError
from storage.history import validate_history, validate_message
from storage.message import ChatKey, ChatMessage, thaw

__all__ = [
    "DEFAULT_AGENT",
    "EXPORT_VERSION",
    "Conversation",
    "conversation_record",
    "message_id",
    "read_conversations",
]

DEFAULT_AGENT: Final = "assistant"
"""The ``agent_id`` of a conversation whose file gives none."""
EXPORT_VERSION: Final = 1
"""The version written in ``chatlayers.v``."""


@attrs.frozen
class Conversation:
    """One conversation read from a file, validated, with its key and message ids set.

    Attributes:
        key: where it is stored.
        messages: the validated messages, oldest first, ids set.
        where: ``FILE:LINE`` it came from (for messages).
    """

    key: ChatKey
    messages: list[ChatMessage]
    where: str


def message_id(conversation_id: str, index: int) -> str:
    """The deterministic id of message ``index`` of a conversation (32 hex characters).

    A re-replay or re-import of the same file therefore stores nothing new.
    """
    digest = hashlib.blake2b(f"{conversation_id}\x00{index}".encode(), digest_size=16)
    return digest.hexdigest()


def read_conversations(
    paths: Sequence[str | os.PathLike[str]], *, system: str = "keep"
) -> list[Conversation]:
    """Read and validate every conversation of ``paths`` (JSONL, or JSON lists).

    Nothing is returned unless every conversation is valid.

    Args:
        system: ``"keep"`` a leading system message, or ``"strip"`` it (a restored history
            then does not repeat the instructions the agent sends itself).

    Raises:
        InvalidMessageError: a line is not JSON, not an object, or its history breaks a rule
            of ``validate_history`` (``FILE:LINE`` and the message index are named).
        InvalidKeyError: a conversation has no usable key (``FILE:LINE`` named).
        ConfigError: a file cannot be read, or ``system`` is not ``keep``/``strip``.
    """
    if system not in ("keep", "strip"):
        raise ConfigError(f"system must be 'keep' or 'strip', got {system!r}")
    if system != "keep" and "system" not in inspect.signature(validate_history).parameters:
        raise ConfigError(
            "--system strip needs storage.history.validate_history(..., system=...), "
            "which this installation does not have"
        )
    out: list[Conversation] = []
    for raw in paths:
        path = Path(raw)
        for number, item in _items(path):
            out.append(_conversation(item, f"{path}:{number}", system))
    return out


def conversation_record(key: ChatKey, messages: Sequence[ChatMessage]) -> dict[str, Any]:
    """The export line of one conversation: the OpenAI messages plus key, ids and timestamps."""
    record: dict[str, Any] = {
        "user_id": key.user_id,
        "session_id": key.session_id,
        "agent_id": key.agent_id,
        "messages": [m.to_openai() for m in messages],
    }
    extension: dict[str, Any] = {
        "v": EXPORT_VERSION,
        "ids": [m.id for m in messages],
        "created_at": [m.created_at.isoformat() if m.created_at else None for m in messages],
    }
    if any(m.metadata for m in messages):
        extension["metadata"] = [thaw(m.metadata) if m.metadata else None for m in messages]
    record["chatlayers"] = extension
    return record


def _items(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line or item number, decoded JSON)`` of a JSONL file or a JSON list file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {str(path)!r}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidMessageError(f"{path}: not UTF-8 text ({exc.reason})") from None
    if path.suffix.lower() == ".json" or text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise InvalidMessageError(f"{path}: not valid JSON: {exc}") from None
        items = data if isinstance(data, list) else [data]
        yield from enumerate(items, 1)
        return
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError as exc:
            raise InvalidMessageError(f"{path}:{number}: not valid JSON: {exc}") from None


def _conversation(item: Any, where: str, system: str = "keep") -> Conversation:
    if not isinstance(item, Mapping):
        raise InvalidMessageError(f"{where}: a conversation must be a JSON object")
    metadata = item.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    conv_id = item.get("id")
    session_id = item.get("session_id", conv_id)
    if session_id is None:
        raise InvalidKeyError(f"{where}: the conversation has neither 'session_id' nor 'id'")
    user_id = item.get(
        "user_id", metadata.get("user_id", conv_id if conv_id is not None else session_id)
    )
    agent_id = item.get("agent_id", DEFAULT_AGENT)
    try:
        key = ChatKey(user_id, session_id, agent_id)
    except InvalidKeyError as exc:
        raise InvalidKeyError(f"{where}: {exc}") from None
    try:
        full = validate_history(item.get("messages"))
    except InvalidMessageError as exc:
        raise InvalidMessageError(f"{where}: {exc}") from None
    ids, created, metas = _extension(item.get("chatlayers"), len(full), where)
    messages = full
    if system == "strip" and full:
        messages = validate_history(full, system="strip")
        if len(messages) < len(full):  # the leading system message went: so do its columns
            ids, created, metas = (None if c is None else c[1:] for c in (ids, created, metas))
    base_id = str(conv_id if conv_id is not None else session_id)
    offset = len(full) - len(messages)  # ids stay those of the full file
    out: list[ChatMessage] = []
    for index, message in enumerate(messages):
        changes: dict[str, Any] = {"id": message_id(base_id, index + offset)}
        if ids is not None:
            changes["id"] = ids[index]
        if created is not None and created[index] is not None:
            changes["created_at"] = _parse_time(created[index], f"{where}: message {index}")
        if metas is not None and metas[index]:
            changes["metadata"] = metas[index]
        candidate = attrs.evolve(message, **changes)
        try:
            out.append(validate_message(candidate, index))
        except InvalidMessageError as exc:
            raise InvalidMessageError(f"{where}: {exc}") from None
    return Conversation(key, out, where)


_Column = Sequence[Any] | None


def _extension(extension: Any, count: int, where: str) -> tuple[_Column, _Column, _Column]:
    """The ``(ids, created_at, metadata)`` lists of the ``chatlayers`` object, each ``None``
    when absent; each given list has ``count`` entries and the ids are distinct."""
    if extension is None:
        return None, None, None
    if not isinstance(extension, Mapping):
        raise InvalidMessageError(f"{where}: 'chatlayers' must be an object")
    ids, created, metas = (extension.get(k) for k in ("ids", "created_at", "metadata"))
    for name, values in (("ids", ids), ("created_at", created), ("metadata", metas)):
        if values is not None and (not isinstance(values, list) or len(values) != count):
            raise InvalidMessageError(
                f"{where}: chatlayers.{name} must be a list of {count} entries"
            )
    if ids is not None:
        repeated = sorted({i for i in ids if isinstance(i, str) and ids.count(i) > 1})
        if repeated:
            raise InvalidMessageError(f"{where}: chatlayers.ids repeats {repeated[0]!r}")
    return ids, created, metas


def _parse_time(value: Any, where: str) -> datetime:
    if not isinstance(value, str):
        raise InvalidMessageError(f"{where}: created_at must be an ISO 8601 string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidMessageError(f"{where}: created_at {value!r} is not ISO 8601") from None
    if parsed.utcoffset() is None:
        raise InvalidMessageError(f"{where}: created_at {value!r} has no timezone")
    return parsed

"""What the store holds for an encrypted message, record or checkpoint message.

A message is stored as a *skeleton* that keeps only what stores and windows need in clear,
with everything else sealed in one token (:mod:`.cipher`) in ``content``:

- clear: the conversation key (the store's own columns), ``id``, ``role``, ``created_at``,
  the store's sequence, the tool-call ids of an assistant message and a tool result's
  ``tool_call_id`` (provider ids such as ``call_9f2c``: stores check tool pairing and cut
  tool-pair-safe windows with them), and the summary marker of a summary message
  (``metadata={"chatlayers": {"summary": True}}``: checkpoint stores refuse unmarked ones);
- sealed: the whole message as the record codec writes it (content text and parts,
  tool-call names and arguments, tool results, ``name``, ``metadata``, ``extra``, the
  optional-field set), so decryption restores it exactly.

The token's associated data is ``domain + user + session + agent + id``: a skeleton copied
to another user, conversation or message id fails to open; the sealed copy of ``id`` and
``role`` is compared with the clear one, so neither can be swapped. Domains keep raw
messages, checkpoint messages and records apart.

A record keeps ``kind``, ``id``, ``created_at`` and ``seq`` clear; its ``data`` is sealed as
``{"ce1": token}`` (the record's ``kind`` joins the associated data).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

import attrs
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from storage.abilities import ConversationRecord
from storage.codec import decode, encode
from storage.errors import CorruptRecordError
from storage.layers.encrypting.cipher import is_token, open_token, seal, token_key_id
from storage.message import ChatKey, ChatMessage, ToolCall, thaw, with_created_at

__all__ = [
    "CHECKPOINT",
    "MESSAGE",
    "RECORD",
    "DataKey",
    "KeyErasedError",
    "aad_prefix",
    "check_sealed",
    "open_message",
    "open_record",
    "seal_message",
    "seal_record",
    "token_key_id",
    "token_of_record",
]

MESSAGE: Final = b"m"
CHECKPOINT: Final = b"c"
RECORD: Final = b"r"
_RECORD_FIELD: Final = "ce1"
_SUMMARY_MARK: Final[Mapping[str, Any]] = MappingProxyType(
    {"chatlayers": MappingProxyType({"summary": True})}
)


class KeyErasedError(CorruptRecordError):
    """A stored value was sealed with a data key the keyring no longer holds: its user was
    erased (crypto-shredded), so it can never be read again."""


@attrs.frozen(repr=False)
class DataKey:
    """One user's unwrapped data key, ready to seal and open (never printed)."""

    user_id: str
    key_id: str
    aead: AESGCM

    def __repr__(self) -> str:
        return f"DataKey({self.user_id!r}, key_id={self.key_id})"


def aad_prefix(domain: bytes, key: ChatKey) -> bytes:
    """The associated data of every token of ``key`` in ``domain``, up to the item id.

    Key parts never hold NUL, so joining them with NUL is unambiguous."""
    parts = f"{key.user_id}\x00{key.session_id}\x00{key.agent_id}\x00"
    return b"chatlayers/" + domain + b"\x00" + parts.encode("utf-8")


def _skeleton_calls(message: ChatMessage) -> tuple[ToolCall, ...]:
    return tuple(ToolCall(call.id, "", "", call.type) for call in message.tool_calls)


def seal_message(data_key: DataKey, prefix: bytes, message: ChatMessage) -> ChatMessage:
    """The skeleton of a validated message whose ``created_at`` is set."""
    token = seal(
        data_key.aead,
        data_key.key_id,
        prefix + message.id.encode("utf-8"),
        encode(message).encode("utf-8"),
    )
    return ChatMessage(
        message.role,
        token,
        _skeleton_calls(message),
        message.tool_call_id,
        None,
        id=message.id,
        created_at=message.created_at,
        metadata=_SUMMARY_MARK if message.is_summary else None,
    )


def check_sealed(stored: ChatMessage, where: str) -> str:
    """The token of a stored skeleton.

    Raises:
        CorruptRecordError: the stored message is not a skeleton (written without this
            layer, or altered).
    """
    token = stored.content
    if not is_token(token):
        raise CorruptRecordError(
            f"{where}: message {stored.id!r} is not encrypted (written without the encrypt "
            "layer, or altered)"
        )
    assert isinstance(token, str)
    return token


def open_message(
    data_key: DataKey, prefix: bytes, stored: ChatMessage, token: str, where: str
) -> ChatMessage:
    """The message a skeleton seals (``token`` its content, its key id ``data_key``'s).

    Raises:
        CorruptRecordError: the token does not authenticate here, or its sealed id or role
            differ from the clear ones.
    """
    plain = open_token(data_key.aead, token, prefix + stored.id.encode("utf-8"), where)
    try:
        text = plain.decode("utf-8")  # json.loads(bytes) would sniff the encoding first
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"{where}: message {stored.id!r}: {exc}") from None
    message = decode(text)
    if message.id != stored.id or message.role != stored.role:
        raise CorruptRecordError(
            f"{where}: message {stored.id!r}: the sealed id or role differs from the stored one"
        )
    if stored.created_at is not None and message.created_at != stored.created_at:
        message = with_created_at(message, stored.created_at)
    return message


def token_of_record(record: ConversationRecord, where: str) -> str:
    """The token of a stored record.

    Raises:
        CorruptRecordError: the record's data is not a sealed value.
    """
    token = record.data.get(_RECORD_FIELD) if len(record.data) == 1 else None
    if not is_token(token):
        raise CorruptRecordError(f"{where}: record {record.id!r} is not encrypted")
    assert isinstance(token, str)
    return token


def _record_aad(prefix: bytes, record: ConversationRecord) -> bytes:
    return prefix + record.id.encode("utf-8") + b"\x00" + record.kind.encode("utf-8")


def seal_record(data_key: DataKey, prefix: bytes, record: ConversationRecord) -> ConversationRecord:
    """``record`` with its data sealed (``kind``, ``id``, ``created_at`` clear)."""
    plain = json.dumps(thaw(record.data), ensure_ascii=False, separators=(",", ":"))
    token = seal(data_key.aead, data_key.key_id, _record_aad(prefix, record), plain.encode())
    return attrs.evolve(record, data={_RECORD_FIELD: token})


def open_record(
    data_key: DataKey, prefix: bytes, stored: ConversationRecord, token: str, where: str
) -> ConversationRecord:
    """The record a stored record seals.

    Raises:
        CorruptRecordError: the token does not authenticate here (another key, id or kind).
    """
    plain = open_token(data_key.aead, token, _record_aad(prefix, stored), where)
    try:
        data = json.loads(plain)
    except ValueError as exc:
        raise CorruptRecordError(f"{where}: record {stored.id!r}: {exc}") from None
    return attrs.evolve(stored, data=data)

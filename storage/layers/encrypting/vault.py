"""The placeholder vault: each PII placeholder's original value, encrypted, for display.

The scrubber replaces PII by placeholders before storage (``<EMAIL_ADDRESS_3f9a2c1d>``).
With a vault, it also hands each (conversation, placeholder, original value) to a
:class:`PlaceholderVault`; the encrypting layer below stores them with the conversation as
records sealed under the user's data key, on the same save. ``EncryptingChatStorage.reveal``
puts the originals back into a text or message for an authorised reader. Nothing on the
model path reveals: ``fetch`` and the summarizer only ever see placeholders. The vault is
shredded with the user (its records are sealed under the destroyed data key, and erased with
the conversation).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

import attrs

from storage.abilities import ConversationRecord
from storage.message import ChatKey, ChatMessage

__all__ = ["VAULT_KIND", "PlaceholderVault", "reveal_in"]

#: The record kind of vault entries (hidden from ``fetch_records``).
VAULT_KIND: Final = "chatlayers.vault"
_MAX_PENDING: Final = 100_000
# The shape of a placeholder (storage.pii.placeholders.PLACEHOLDER_RE), without importing the
# scrubber: an upper-case entity name and 8 hex digits in angle brackets.
_PLACEHOLDER: Final = re.compile(r"<[A-Z][A-Z0-9_]*_[0-9a-f]{8}>")


class PlaceholderVault:
    """Placeholders waiting to be stored, by conversation; the scrubber calls it.

    Pass it to the scrubber as ``PIIScrubber(vault=layer.vault)``: the scrubber calls
    ``vault(key, placeholder, value)`` for every placeholder it makes, and the encrypting
    layer stores what is pending for a key on that key's next write (the save the scrubbed
    message is on).
    """

    def __init__(self) -> None:
        self._pending: dict[ChatKey, dict[str, str]] = {}
        self._count = 0

    def __call__(self, key: ChatKey, placeholder: str, value: str) -> None:
        pending = self._pending.setdefault(key, {})
        if placeholder not in pending:
            if self._count >= _MAX_PENDING:  # no encrypting layer drains it: stay bounded
                self._pending.clear()
                self._count = 0
                pending = self._pending.setdefault(key, {})
            pending[placeholder] = value
            self._count += 1

    def has_pending(self, key: ChatKey) -> bool:
        return bool(self._pending.get(key))

    def pending_records(self, key: ChatKey) -> list[ConversationRecord]:
        """The records to store for ``key`` (one per placeholder; the id derives from the
        placeholder, so storing one twice is a no-op)."""
        return [
            ConversationRecord(
                VAULT_KIND,
                {"placeholder": placeholder, "value": value},
                id=_record_id(placeholder),
            )
            for placeholder, value in list(self._pending.get(key, {}).items())
        ]

    def done(self, key: ChatKey, record: ConversationRecord) -> None:
        """``record`` is stored: it is no longer pending."""
        pending = self._pending.get(key)
        if pending is not None and pending.pop(str(record.data["placeholder"]), None) is not None:
            self._count -= 1
            if not pending:
                del self._pending[key]

    def drop(self, key: ChatKey) -> None:
        self._count -= len(self._pending.pop(key, {}))

    def drop_user(self, user_id: str) -> None:
        for key in [k for k in self._pending if k.user_id == user_id]:
            self.drop(key)


def _record_id(placeholder: str) -> str:
    return "vault-" + hashlib.sha256(placeholder.encode("utf-8")).hexdigest()[:32]


def _reveal_text(text: str, originals: Mapping[str, str], *, json_string: bool = False) -> str:
    if "<" not in text:
        return text

    def original(match: re.Match[str]) -> str:
        value = originals.get(match[0])
        if value is None:
            return match[0]
        return json.dumps(value, ensure_ascii=False)[1:-1] if json_string else value

    return _PLACEHOLDER.sub(original, text)


def _reveal_parts(
    parts: tuple[Mapping[str, Any], ...], originals: Mapping[str, str]
) -> Iterator[Any]:
    for part in parts:
        text = part.get("text")
        if isinstance(text, str):
            yield {**part, "text": _reveal_text(text, originals)}
        else:
            yield part


def reveal_in(value: Any, originals: Mapping[str, str]) -> Any:
    """``value`` (a str or a ``ChatMessage``) with known placeholders replaced: a message's
    content text, the ``text`` of its parts and its tool-call arguments (JSON-escaped, so
    the arguments stay valid JSON)."""
    if isinstance(value, str):
        return _reveal_text(value, originals)
    if not isinstance(value, ChatMessage):
        raise TypeError(f"reveal takes a str or a ChatMessage, got {type(value).__name__}")
    if not originals:
        return value
    content = value.content
    if isinstance(content, str):
        content = _reveal_text(content, originals)
    elif isinstance(content, tuple):
        content = tuple(_reveal_parts(content, originals))
    calls = tuple(
        attrs.evolve(call, arguments=_reveal_text(call.arguments, originals, json_string=True))
        for call in value.tool_calls
    )
    return attrs.evolve(value, content=content, tool_calls=calls)

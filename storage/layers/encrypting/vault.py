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
from collections.abc import Mapping
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
# A JSON string literal (outside one, no ``"`` occurs in a JSON document).
_STRING_LITERAL: Final = re.compile(r'"(?:[^"\\]++|\\.)*+"')


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


def _reveal_json(text: str, originals: Mapping[str, str]) -> str | None:
    """``text`` revealed as a JSON document (each string literal decoded, revealed and
    encoded again, the rest of the text kept byte for byte), or ``None`` when ``text`` is
    not a JSON object or array."""
    if text.lstrip()[:1] not in ("{", "["):
        return None
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return None
    pieces: list[str] = []
    last = 0
    for match in _STRING_LITERAL.finditer(text):
        literal = match[0]
        value = json.loads(literal) if "\\" in literal else literal[1:-1]
        revealed = _reveal_text(value, originals)
        if revealed == value:
            continue
        pieces += (text[last : match.start()], json.dumps(revealed, ensure_ascii=literal.isascii()))
        last = match.end()
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


def _reveal_payload(text: str, originals: Mapping[str, str], *, arguments: bool = False) -> str:
    """A content text or a tool call's arguments: a JSON document stays valid JSON (the
    originals JSON-escaped); other text gets the originals as they are, except arguments
    (JSON by contract, even when cut short), where they are escaped in place."""
    if "<" not in text:
        return text
    revealed = _reveal_json(text, originals)
    if revealed is not None:
        return revealed
    return _reveal_text(text, originals, json_string=arguments)


def _reveal_value(value: Any, originals: Mapping[str, str]) -> Any:
    """Every string inside a JSON-like value (a content part, a ``json`` block)."""
    if isinstance(value, str):
        return _reveal_payload(value, originals)
    if isinstance(value, Mapping):
        return {k: _reveal_value(v, originals) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_reveal_value(v, originals) for v in value]
    return value


def reveal_in(value: Any, originals: Mapping[str, str]) -> Any:
    """``value`` (a str or a ``ChatMessage``) with known placeholders replaced: a message's
    content text, every string of its parts (text, ``json`` blocks, ...), its tool-call
    arguments and legacy ``function_call`` arguments. A text that is a JSON document (a
    JSON tool result, arguments) stays valid JSON: each original is JSON-escaped and parses
    back to itself."""
    if isinstance(value, str):
        return _reveal_payload(value, originals)
    if not isinstance(value, ChatMessage):
        raise TypeError(f"reveal takes a str or a ChatMessage, got {type(value).__name__}")
    if not originals:
        return value
    content = value.content
    if isinstance(content, str):
        content = _reveal_payload(content, originals)
    elif isinstance(content, tuple):
        content = tuple(_reveal_value(part, originals) for part in content)
    calls = tuple(
        attrs.evolve(call, arguments=_reveal_payload(call.arguments, originals, arguments=True))
        for call in value.tool_calls
    )
    extra = value.extra
    legacy = extra.get("function_call")
    if isinstance(legacy, Mapping) and isinstance(legacy.get("arguments"), str):
        arguments = _reveal_payload(legacy["arguments"], originals, arguments=True)
        extra = {**extra, "function_call": {**legacy, "arguments": arguments}}
    return attrs.evolve(value, content=content, tool_calls=calls, extra=extra)

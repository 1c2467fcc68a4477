"""One batch's worth of scrubbing for one conversation: what :class:`PIIScrubber` does to a text,
a JSON document, a whole integer and a keyed JSON value, with what was found in each text
remembered for the batch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from storage.message import ChatKey
from storage.pii.keyed import is_one_value, keyed_entity
from storage.pii.known_values import KnownValues
from storage.pii.payloads import scrub_json
from storage.pii.placeholders import PLACEHOLDER_RE, KeyedHasher
from storage.pii.spans import Detection

if TYPE_CHECKING:
    from storage.pii.scrubber import PIIScrubber

__all__ = ["Run"]

_MAX_PASSES: Final = 4


# Characters next to a replaced span that cannot join it to a neighbour: no detector starts
# a match at one of these (so none looks behind it into the span) or ends one there (so none
# looks ahead into the span). With both sides loose, the next pass would find nothing new.
_LOOSE_BEFORE: Final = frozenset(" \t\n\r\f\v([{\"',;")
_LOOSE_AFTER: Final = frozenset(" \t\n\r\f\v,;:!?)]}\"'")


def _glued(text: str, found: list[Detection]) -> bool:
    """Whether some detection touches a character that could make it part of a neighbour."""
    size = len(text)
    before, after = _LOOSE_BEFORE, _LOOSE_AFTER
    for start, end, _ in found:
        if (start > 0 and text[start - 1] not in before) or (end < size and text[end] not in after):
            return True
    return False


class Run:
    """One message's (or one batch's) worth of scrubbing: the conversation's hasher and known
    values, and what was found in each text seen so far (tool results repeat their values:
    dates, codes, statuses)."""

    __slots__ = ("_chat_key", "_found", "_hasher", "_known", "_owner", "_rules_only")

    def __init__(
        self, owner: PIIScrubber, hasher: KeyedHasher, known: KnownValues | None, key: ChatKey
    ):
        self._owner, self._hasher, self._known, self._chat_key = owner, hasher, known, key
        self._found: dict[str, list[Detection]] = {}
        # Only built-in rules run: a short word (prefilter.plain_word) is left as it is.
        self._rules_only = known is None and owner._rules_only

    def _find(self, text: str) -> list[Detection]:
        found = self._found.get(text)
        if found is None:
            found = self._found[text] = self._owner._find(text, self._known)
        return found

    def text(self, text: str) -> str:
        """Scrub plain text. A replacement changes what its neighbours touch ("a@b.co+44 20
        7946 0958": the phone number is glued to the address), so the result is scanned again
        until nothing new is found, at most ``_MAX_PASSES`` times: this keeps scrubbing
        idempotent for all but chains of more than that many glued-together values."""
        found = self._found.get(text)
        if found is None:
            found = self._found[text] = self._owner._find(text, self._known)
        if not found:
            return text  # most texts: nothing found
        owner = self._owner
        for n in range(_MAX_PASSES):
            if n:
                found = self._find(text)
                if not found:
                    break
            # Masks keep digits ("***-****4111"), which can join what follows: always rescan.
            again = owner.mode == "mask" or _glued(text, found)
            text = owner._replace(text, found, self._hasher, self._chat_key)
            if not again:
                break  # nothing touched a replaced span: another pass would find nothing new
        return text

    def payload(self, text: str) -> str:
        """A JSON document value by value, or plain text when it is not JSON."""
        entities = self._owner._key_entities
        keyed = self.keyed_value if entities is not None else None
        scrubbed = scrub_json(
            text, self.text, self.integer, keyed, entities, words_unchanged=self._rules_only
        )
        return self.text(text) if scrubbed is None else scrubbed

    def integer(self, digits: str) -> str | None:
        """A placeholder for a whole integer that is PII (a card number), else ``None``."""
        found = self._find(digits)
        if len(found) == 1 and found[0].start == 0 and found[0].end == len(digits):
            return self._owner._replace(digits, found, self._hasher, self._chat_key)
        return None

    def keyed(self, key: str, value: str) -> str | None:
        """A placeholder for ``value`` under a JSON ``key`` that names an entity, else None."""
        entity = keyed_entity(self._owner._json_keys, key, value)
        return None if entity is None else self.keyed_value(entity, value)

    def keyed_value(self, entity: str, value: str) -> str | None:
        """A placeholder for ``value`` under a JSON key that names ``entity``, else None."""
        owner = self._owner
        if not is_one_value(value) or (
            value[0] == "<" and PLACEHOLDER_RE.fullmatch(value) is not None
        ):
            return None
        owner.counts[entity] += 1
        if owner._observer is not None:
            owner._observer(entity, value)
        placeholder = self._hasher.placeholder(entity, value)
        if owner._vault is not None:
            owner._vault(self._chat_key, placeholder, value)
        return placeholder

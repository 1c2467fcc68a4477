"""``PIIScrubber``: the message transform that replaces PII with placeholders before storage.

It plugs into ``TransformingChatStorage(inner, PIIScrubber(...))`` and scrubs, in each
message: the content text and the ``text`` of content parts; tool-call ``arguments`` value by
value (the JSON stays valid, keys unchanged; arguments that are not JSON are scrubbed as
text); tool results (a JSON result value by value, anything else as text); the legacy
``function_call`` arguments and a ``refusal`` text; and the string values of ``metadata``
(adapters keep framework data there), except the library's own ``chatlayers`` markers. It
never touches ids, ``tool_call_id``, function names or any mapping key.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Final, Literal, TypeAlias, get_args

import attrs

from storage.checked import Check
from storage.errors import ConfigError
from storage.message import ChatKey, ChatMessage
from storage.pii.detectors import SpanFinder
from storage.pii.entities import (
    BUILTIN_ENTITIES,
    BUILTIN_FINDERS,
    SECRET_ENTITIES,
    CustomDetector,
    adapt_detector,
    check_entity,
    choose_entities,
)
from storage.pii.fields import scrub_json_value, scrub_message
from storage.pii.keyed import KeyEntities, compile_json_keys
from storage.pii.known_values import FrozenValues, KnownValues, freeze_known_values
from storage.pii.ner import EntityRecognizer
from storage.pii.placeholders import MASKED_ENTITIES, PLACEHOLDER_RE, KeyedHasher, mask
from storage.pii.prefilter import BITS, plain_word, possible
from storage.pii.protected import TextView
from storage.pii.run import Run
from storage.pii.secret import RANDOM_SECRET, SECRET_ENV, load_secret, warn_random_secret
from storage.pii.spans import Detection, resolve

if TYPE_CHECKING:
    from storage.abilities import ConversationRecord


def _check_entities(entities: Iterable[str] | None) -> None:
    choose_entities(entities)  # a URL or TOML mistake is listed with the others


Entities: TypeAlias = Annotated[Iterable[str] | None, Check(_check_entities)]

__all__ = [
    "BUILTIN_ENTITIES",
    "SECRET_ENTITIES",
    "SECRET_ENV",
    "CustomDetector",
    "KnownValuesFor",
    "Mode",
    "PIIScrubber",
]

Mode = Literal["redact", "mask"]

_CUSTOM_RANK: Final = 50
_KNOWN_RANK: Final = 100
_RECOGNIZER_RANK: Final = 200
_MAX_HASHERS: Final = 1024

KnownValuesFor = Callable[[ChatKey], Mapping[str, Iterable[str]]]


class PIIScrubber:
    """Replace PII in messages with keyed-hash placeholders such as ``<EMAIL_ADDRESS_3f9a2c1d>``.

    A placeholder is the first 32 bits of HMAC-SHA256(secret, conversation key, normalized
    value): stable for one value within a conversation, unlinkable across conversations,
    never matched again (scrubbing is idempotent), and no state is kept. Overlapping
    detections merge into one placeholder. Built-in detection is linear in the text length.

    Args:
        secret: the HMAC key. Default: ``$CHATLAYERS_PII_SECRET``; without it a random
            per-process secret is used and a ``RuntimeWarning`` says placeholders will not be
            stable across restarts.
        entities: which built-in entities to find (default: all of :data:`BUILTIN_ENTITIES`:
            ``EMAIL_ADDRESS``, ``PHONE_NUMBER``, ``CREDIT_CARD``, ``IBAN_CODE``, ``US_SSN``,
            ``IP_ADDRESS``, ``API_KEY``, ``JWT``, ``PRIVATE_KEY``, ``PASSWORD``,
            ``DATE_OF_BIRTH``, ``STREET_ADDRESS``, ``ZIP_CODE``). Custom
            detectors, known values and the recognizer are always on.
        mode: ``"redact"`` (placeholders) or ``"mask"`` (card and phone numbers keep their
            last four digits, ``**** **** **** 1234``; other entities get placeholders).
        known_values: values the application knows are PII, by entity
            (``{"PERSON": ["Mia Li"], "USER_ID": ["mia_li_3668"]}``), matched
            case-insensitively on word boundaries, also inside JSON payloads.
        known_values_for: ``key -> {entity: values}``, called once per scrubbed message (once
            per batch through ``transform_batch``) for that conversation's own values (its
            user's profile); added to ``known_values``.
        detectors: custom detectors by entity name: a regex (string or compiled), a
            :class:`RegexDetector` (regex + validator), or any callable ``text -> iterable of
            (start, end)``. A built-in name replaces that built-in detector.
        recognizer: an optional :class:`~storage.pii.ner.EntityRecognizer` (a model-based
            detector: :class:`~storage.pii.ner.PresidioRecognizer` with the ``ner`` extra,
            or any callable of that shape).
        json_keys: JSON key names whose string or number value is replaced whole, by
            entity (default :data:`~storage.pii.keyed.DEFAULT_JSON_KEYS`: ``dob``,
            ``birth_date`` -> ``DATE_OF_BIRTH``; ``address1``, ``street`` ->
            ``STREET_ADDRESS``; ``zip``, ``postal_code`` -> ``ZIP_CODE``; ``first_name``,
            ``last_name`` -> ``PERSON``); applies in tool-call arguments, tool results and
            JSON blocks. ``{}`` turns it off.
        vault: called as ``vault(key, placeholder, original value)`` for every placeholder
            made (not for masks), e.g. the encrypting layer's ``PlaceholderVault``, which
            keeps the originals encrypted for ``reveal``. ``None`` (default): nothing kept.
        secret_source: where ``secret`` came from, as ``describe()`` shows it
            (``secret=...``): configuration passes ``"env:VARIABLE"`` or ``"config"``;
            default ``"argument"`` for a secret given in code. Without a secret it is
            ``env:CHATLAYERS_PII_SECRET`` or ``random per-process``. Never the secret.

    Attributes:
        counts: ``Counter`` of the entities replaced since construction, by entity name.

    Raises:
        ConfigError: empty secret, unknown entity, bad mode, malformed known values or
            detectors (at construction); a ``known_values_for`` result or custom detector
            span that is malformed (when scrubbing).
    """

    def __init__(
        self,
        secret: str | bytes | None = None,
        *,
        entities: Entities = None,
        mode: Mode = "redact",
        known_values: Mapping[str, Iterable[str]] | None = None,
        known_values_for: KnownValuesFor | None = None,
        detectors: Mapping[str, CustomDetector] | None = None,
        recognizer: EntityRecognizer | None = None,
        json_keys: Mapping[str, Iterable[str]] | None = None,
        vault: Callable[[ChatKey, str, str], None] | None = None,
        secret_source: str | None = None,
    ) -> None:
        self._secret, self._secret_source = load_secret(secret, secret_source)
        # Warned on the first scrub, not here: a stack built only to read must stay quiet.
        self._warn_random = self._secret_source == RANDOM_SECRET
        if mode not in get_args(Mode):
            raise ConfigError(f"PII mode must be 'redact' or 'mask', got {mode!r}")
        self.mode: Mode = mode
        chosen = choose_entities(entities)
        finders: dict[str, tuple[int, SpanFinder]] = {
            name: (rank, BUILTIN_FINDERS[name])
            for rank, name in enumerate(BUILTIN_ENTITIES)
            if name in chosen
        }
        for i, (name, detector) in enumerate((detectors or {}).items()):
            check_entity(name, "detector entity")
            rank = BUILTIN_ENTITIES.index(name) if name in BUILTIN_FINDERS else _CUSTOM_RANK + i
            finders[name] = (rank, adapt_detector(name, detector))
        self._finders: tuple[tuple[str, int, SpanFinder], ...] = tuple(
            (name, rank, finder) for name, (rank, finder) in finders.items()
        )
        # The finders to run on a text, by what prefilter.possible says can match there.
        self._plans: dict[int, tuple[tuple[str, int, SpanFinder], ...]] = {}
        self._rules_only = recognizer is None and all(
            finder is BUILTIN_FINDERS.get(name) for name, _, finder in self._finders
        )
        self._known: FrozenValues = freeze_known_values(known_values)
        self._known_for = known_values_for
        if recognizer is not None and not callable(recognizer):
            raise ConfigError("recognizer must be callable: text -> [(start, end, entity)]")
        self._recognizer = recognizer
        self._json_keys = compile_json_keys(json_keys)
        # The entity each JSON object key names, found once per key name.
        self._key_entities = KeyEntities(self._json_keys) if self._json_keys else None
        self.counts: Counter[str] = Counter()
        # Called with (entity, original value) for every replacement: benchmarks score with it.
        self._observer: Callable[[str, str], None] | None = None
        self._hashers: dict[ChatKey, KeyedHasher] = {}
        self._vault = vault

    # --- public API -------------------------------------------------------------------------

    def __call__(self, message: ChatMessage, key: ChatKey) -> ChatMessage:
        """Scrub one message for conversation ``key`` (the ``TransformingChatStorage`` hook).

        Returns:
            ``message`` itself when nothing was found, else a copy (same ``id``,
            ``created_at``, ``present``) with the PII replaced.
        """
        return scrub_message(message, self._run(key))

    def transform_batch(self, messages: Sequence[ChatMessage], key: ChatKey) -> list[ChatMessage]:
        """Scrub the messages of one batch for conversation ``key``, in order (the batch hook
        of ``TransformingChatStorage``): the same messages as calling the scrubber on each,
        but a text that recurs in the batch (a date, a status in a list of flights) is
        searched once, and ``known_values_for`` is called once.
        """
        run = self._run(key)
        return [scrub_message(message, run) for message in messages]

    def transform_record(self, record: ConversationRecord, key: ChatKey) -> ConversationRecord:
        """Scrub a conversation record's data for conversation ``key`` (the
        ``TransformingChatStorage`` hook of ``save_record``): string values and whole
        integers that are PII, values under keys that name an entity (``json_keys``); keys,
        ``kind``, ``id`` and other values kept. ``record`` itself when nothing was found."""
        data = scrub_json_value(record.data, self._run(key), None)
        return record if data is record.data else attrs.evolve(record, data=data)

    def scrub_text(self, text: str, key: ChatKey) -> str:
        """Scrub plain ``text`` for conversation ``key`` (``text`` itself when nothing found)."""
        return self._run(key).text(text)

    def detect(self, text: str, key: ChatKey | None = None) -> list[Detection]:
        """What would be replaced in ``text``: merged, sorted detections (counts unchanged).

        ``key`` selects the conversation's known values (``known_values_for``); without it
        only the constructor's known values apply.
        """
        return self._find(text, self._known_values(key))

    def describe(self) -> str:
        """One line for logs and ``describe()`` of a stack; holds no secret and no values."""
        names = ",".join(name for name, _, _ in self._finders)
        parts = [f"mode={self.mode}", f"entities={names}", f"secret={self._secret_source}"]
        if self._known:
            parts.append(f"known_values={len(self._known)}")
        if self._known_for is not None:
            parts.append("known_values_for=yes")
        if self._recognizer is not None:
            parts.append(f"recognizer={type(self._recognizer).__name__}")
        return f"PIIScrubber({', '.join(parts)})"

    def __repr__(self) -> str:
        return self.describe()

    # --- internals --------------------------------------------------------------------------

    def _known_values(self, key: ChatKey | None) -> KnownValues | None:
        pairs = self._known
        if key is not None and self._known_for is not None:
            pairs = pairs | freeze_known_values(self._known_for(key))
        return KnownValues.compile(pairs)

    def _run(self, key: ChatKey) -> Run:
        hasher = self._hashers.get(key)
        if hasher is None:
            if len(self._hashers) >= _MAX_HASHERS:
                self._hashers.clear()  # a cache of HMAC states only: dropping it is harmless
            hasher = self._hashers[key] = KeyedHasher(self._secret, key)
            if self._warn_random:
                self._warn_random = False
                warn_random_secret()
        return Run(self, hasher, self._known_values(key), key)

    def _find(self, text: str, known: KnownValues | None) -> list[Detection]:
        if not text:
            return []
        if plain_word(text):  # "economy", "one_way": only custom detectors can match it
            plan = self._plan(0)
            if not plan and known is None and self._recognizer is None:
                return []
            view = TextView(text)
        else:
            view = TextView(text)
            plan = self._plan(possible(view))
        found: list[tuple[int, int, int, str]] = []
        for name, rank, finder in plan:
            for start, end in finder(view):
                found.append((start, end, rank, name))
        if known is not None:
            found.extend((start, end, _KNOWN_RANK, name) for start, end, name in known.find(text))
        if self._recognizer is not None:
            for start, end, name in self._recognizer(text):
                check_entity(name, "recognizer entity")
                if 0 <= start < end <= len(text):
                    found.append((start, end, _RECOGNIZER_RANK, name))
        if not found:
            return []
        if "<" in text:
            found = _outside_placeholders(text, found)
        return resolve(found)

    def _plan(self, mask: int) -> tuple[tuple[str, int, SpanFinder], ...]:
        """The finders to run when ``mask`` names the built-ins that can match; a custom
        detector (also one that replaces a built-in) always runs."""
        plan = self._plans.get(mask)
        if plan is None:
            plan = self._plans[mask] = tuple(
                item
                for item in self._finders
                if item[2] is not BUILTIN_FINDERS.get(item[0]) or BITS[item[0]] & mask
            )
        return plan

    def _replace(
        self, text: str, found: list[Detection], hasher: KeyedHasher, key: ChatKey | None = None
    ) -> str:
        pieces: list[str] = []
        last = 0
        masking = self.mode == "mask"
        for start, end, entity in found:
            pieces.append(text[last:start])
            value = text[start:end]
            if self._observer is not None:
                self._observer(entity, value)
            if masking and entity in MASKED_ENTITIES:
                pieces.append(mask(value))
            else:
                placeholder = hasher.placeholder(entity, value)
                if self._vault is not None and key is not None:
                    self._vault(key, placeholder, value)
                pieces.append(placeholder)
            self.counts[entity] += 1
            last = end
        pieces.append(text[last:])
        return "".join(pieces)


def _outside_placeholders(
    text: str, found: list[tuple[int, int, int, str]]
) -> list[tuple[int, int, int, str]]:
    """Drop detections that touch an existing placeholder: placeholders are never re-matched."""
    spans = [m.span() for m in PLACEHOLDER_RE.finditer(text)]
    if not spans:
        return found
    starts = [start for start, _ in spans]
    kept = []
    for item in found:
        i = bisect_right(starts, item[1] - 1) - 1
        if i < 0 or spans[i][1] <= item[0]:
            kept.append(item)
    return kept

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

import difflib
import os
import re
import warnings
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, get_args

import attrs

from storage.errors import ConfigError
from storage.message import ChatKey, ChatMessage, trusted_message, trusted_tool_call
from storage.pii.credentials import (
    find_api_keys,
    find_jwts,
    find_private_keys,
    find_url_passwords,
)
from storage.pii.detectors import (
    Detector,
    RegexDetector,
    SpanFinder,
    find_credit_cards,
    find_emails,
    find_ibans,
    find_ip_addresses,
    find_us_ssns,
)
from storage.pii.fields import scrub_json_value, scrub_part, scrub_value
from storage.pii.freetext import find_dates_of_birth, find_street_addresses, find_zip_codes
from storage.pii.keyed import KeyEntities, compile_json_keys
from storage.pii.known_values import FrozenValues, KnownValues, freeze_known_values
from storage.pii.ner import EntityRecognizer
from storage.pii.phone import find_phone_numbers
from storage.pii.placeholders import (
    ENTITY_NAME_RE,
    MASKED_ENTITIES,
    PLACEHOLDER_RE,
    KeyedHasher,
    mask,
)
from storage.pii.prefilter import BITS, plain_word, possible
from storage.pii.protected import TextView
from storage.pii.run import Run
from storage.pii.spans import Detection, resolve

if TYPE_CHECKING:
    from storage.abilities import ConversationRecord

__all__ = ["BUILTIN_ENTITIES", "SECRET_ENTITIES", "SECRET_ENV", "Mode", "PIIScrubber"]

Mode = Literal["redact", "mask"]
SECRET_ENV: Final = "CHATLAYERS_PII_SECRET"

# Built-in detectors, strongest first: when overlapping detections are equally long, the
# earlier entity names the merged span.
_BUILTIN: Final[dict[str, SpanFinder]] = {
    "PRIVATE_KEY": find_private_keys,
    "JWT": find_jwts,
    "API_KEY": find_api_keys,
    "PASSWORD": find_url_passwords,
    "EMAIL_ADDRESS": find_emails,
    "IBAN_CODE": find_ibans,
    "CREDIT_CARD": find_credit_cards,
    "US_SSN": find_us_ssns,
    "IP_ADDRESS": find_ip_addresses,
    "PHONE_NUMBER": find_phone_numbers,
    "DATE_OF_BIRTH": find_dates_of_birth,
    "STREET_ADDRESS": find_street_addresses,
    "ZIP_CODE": find_zip_codes,
}
#: Every entity the built-in detectors find (Presidio's names where Presidio has one).
BUILTIN_ENTITIES: Final = tuple(_BUILTIN)
#: The credential entities among them.
SECRET_ENTITIES: Final = frozenset({"PRIVATE_KEY", "JWT", "API_KEY", "PASSWORD"})

_AS_STORED: Final = frozenset({"content", "tool_calls"})
_CUSTOM_RANK: Final = 50
_KNOWN_RANK: Final = 100
_RECOGNIZER_RANK: Final = 200
_PROCESS_SECRET: Final = os.urandom(32)
_MAX_HASHERS: Final = 1024

#: What ``detectors=`` accepts per entity: a regex (source or compiled), a ``RegexDetector``
#: (regex + validator), or any callable ``text -> iterable of (start, end)``.
CustomDetector = Detector | RegexDetector | re.Pattern[str] | str
KnownValuesFor = Callable[[ChatKey], Mapping[str, Iterable[str]]]


def _load_secret(secret: str | bytes | None, source: str | None) -> tuple[bytes, str]:
    """The secret and where it came from, as ``describe()`` shows it: ``env:VARIABLE``,
    ``config``, ``argument`` (given in code) or ``random per-process``."""
    if secret is not None:
        if isinstance(secret, str):
            secret = secret.encode("utf-8")
        if not isinstance(secret, bytes) or not secret:
            raise ConfigError("the PII secret must be a non-empty str or bytes")
        return secret, source or "argument"
    env = os.environ.get(SECRET_ENV)
    if env:
        return env.encode("utf-8"), f"env:{SECRET_ENV}"
    return _PROCESS_SECRET, _RANDOM


_RANDOM = "random per-process"


def _warn_random_secret() -> None:
    warnings.warn(
        f"PIIScrubber: no secret given and {SECRET_ENV} is not set; using a random "
        "per-process secret, so placeholders will not be stable across restarts",
        RuntimeWarning,
        stacklevel=4,
    )


def _check_entity(name: object, what: str) -> str:
    if not isinstance(name, str) or ENTITY_NAME_RE.fullmatch(name) is None:
        raise ConfigError(f"{what} {name!r} must be an upper-case name like 'PERSON'")
    return name


def _adapt(name: str, detector: object) -> SpanFinder:
    """Turn a custom detector (pattern, RegexDetector or span callable) into a SpanFinder."""
    if isinstance(detector, str | re.Pattern):
        detector = RegexDetector(detector)
    if not callable(detector):
        raise ConfigError(
            f"detector for {name} must be a regex, a RegexDetector or a callable "
            f"text -> [(start, end)], got {type(detector).__name__}"
        )
    find: Detector = detector

    def finder(view: TextView) -> Iterator[tuple[int, int]]:
        size = len(view.text)
        for span in find(view.text):
            start, end = span
            if not (isinstance(start, int) and isinstance(end, int) and 0 <= start <= end <= size):
                raise ConfigError(
                    f"detector for {name} returned span {span!r} outside a text of length {size}"
                )
            yield start, end

    return finder


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
        entities: Iterable[str] | None = None,
        mode: Mode = "redact",
        known_values: Mapping[str, Iterable[str]] | None = None,
        known_values_for: KnownValuesFor | None = None,
        detectors: Mapping[str, CustomDetector] | None = None,
        recognizer: EntityRecognizer | None = None,
        json_keys: Mapping[str, Iterable[str]] | None = None,
        vault: Callable[[ChatKey, str, str], None] | None = None,
        secret_source: str | None = None,
    ) -> None:
        self._secret, self._secret_source = _load_secret(secret, secret_source)
        # Warned on the first scrub, not here: a stack built only to read must stay quiet.
        self._warn_random = self._secret_source == _RANDOM
        if mode not in get_args(Mode):
            raise ConfigError(f"PII mode must be 'redact' or 'mask', got {mode!r}")
        self.mode: Mode = mode
        if entities is None:
            chosen = list(BUILTIN_ENTITIES)
        else:
            if isinstance(entities, str):
                raise ConfigError("entities must be an iterable of names, not one string")
            chosen = []
            for name in entities:
                if name not in _BUILTIN:
                    hint = [n for n in BUILTIN_ENTITIES if str(name).upper() in n]
                    hint = hint or difflib.get_close_matches(str(name), BUILTIN_ENTITIES, n=1)
                    raise ConfigError(
                        f"unknown PII entity {name!r}"
                        + (f"; did you mean {hint[0]!r}?" if hint else "")
                        + f" (known: {', '.join(BUILTIN_ENTITIES)})"
                    )
                chosen.append(name)
        finders: dict[str, tuple[int, SpanFinder]] = {
            name: (rank, _BUILTIN[name])
            for rank, name in enumerate(BUILTIN_ENTITIES)
            if name in chosen
        }
        for i, (name, detector) in enumerate((detectors or {}).items()):
            _check_entity(name, "detector entity")
            rank = BUILTIN_ENTITIES.index(name) if name in _BUILTIN else _CUSTOM_RANK + i
            finders[name] = (rank, _adapt(name, detector))
        self._finders: tuple[tuple[str, int, SpanFinder], ...] = tuple(
            (name, rank, finder) for name, (rank, finder) in finders.items()
        )
        # The finders to run on a text, by what prefilter.possible says can match there.
        self._plans: dict[int, tuple[tuple[str, int, SpanFinder], ...]] = {}
        self._rules_only = recognizer is None and all(
            finder is _BUILTIN.get(name) for name, _, finder in self._finders
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
        return self._scrub(message, self._run(key))

    def transform_batch(self, messages: Sequence[ChatMessage], key: ChatKey) -> list[ChatMessage]:
        """Scrub the messages of one batch for conversation ``key``, in order (the batch hook
        of ``TransformingChatStorage``): the same messages as calling the scrubber on each,
        but a text that recurs in the batch (a date, a status in a list of flights) is
        searched once, and ``known_values_for`` is called once.
        """
        run = self._run(key)
        return [self._scrub(message, run) for message in messages]

    def _scrub(self, message: ChatMessage, run: Run) -> ChatMessage:
        changes: dict[str, Any] = {}
        scrub = run.payload if message.role == "tool" else run.text
        content = message.content
        if isinstance(content, str):
            new_content = scrub(content)
            if new_content != content:
                changes["content"] = new_content
        elif isinstance(content, tuple) and content:
            parts = [scrub_part(part, scrub, run) for part in content]
            if any(new is not old for new, old in zip(parts, content, strict=True)):
                changes["content"] = tuple(parts)
        if message.tool_calls:
            calls = []
            for call in message.tool_calls:
                arguments = call.arguments
                if isinstance(arguments, str):
                    new_arguments = run.payload(arguments)
                    if new_arguments != arguments:
                        call = trusted_tool_call(call.id, call.name, new_arguments, call.type)
                calls.append(call)
            if any(new is not old for new, old in zip(calls, message.tool_calls, strict=True)):
                changes["tool_calls"] = tuple(calls)
        if message.extra:
            extra = self._scrub_extra(message.extra, run)
            if extra is not None:
                changes["extra"] = extra
        if message.metadata:
            # Adapters keep framework data here (reasoning summaries, LangChain kwargs,
            # citations): it reaches the store, so its string values are scrubbed too.
            metadata = {
                k: v if k == "chatlayers" else scrub_value(v, run)
                for k, v in message.metadata.items()
            }
            if any(metadata[k] is not v for k, v in message.metadata.items()):
                changes["metadata"] = metadata
        if not changes:
            return message
        content = changes.get("content", message.content)
        if changes.keys() <= _AS_STORED and not isinstance(content, tuple):
            # Text and tool calls are stored as they are: no converter to run (evolve's cost).
            return trusted_message(
                message.role,
                content,
                changes.get("tool_calls", message.tool_calls),
                message.tool_call_id,
                message.name,
                message.id,
                message.created_at,
                message.metadata,
                message.extra,
                message.present,
            )
        return attrs.evolve(message, **changes)

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
                _warn_random_secret()
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
                _check_entity(name, "recognizer entity")
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
                if item[2] is not _BUILTIN.get(item[0]) or BITS[item[0]] & mask
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

    @staticmethod
    def _scrub_extra(extra: Mapping[str, Any], run: Run) -> dict[str, Any] | None:
        """Legacy ``function_call`` arguments, the ``refusal`` text and the assistant audio's
        ``transcript`` (never its base64 ``data``); ``None`` if unchanged."""
        out = dict(extra)
        call = extra.get("function_call")
        if isinstance(call, Mapping) and isinstance(call.get("arguments"), str):
            arguments = run.payload(call["arguments"])
            if arguments != call["arguments"]:
                out["function_call"] = {**call, "arguments": arguments}
        refusal = extra.get("refusal")
        if isinstance(refusal, str):
            out["refusal"] = run.text(refusal)
        audio = extra.get("audio")
        if isinstance(audio, Mapping) and isinstance(audio.get("transcript"), str):
            transcript = run.text(audio["transcript"])
            if transcript != audio["transcript"]:
                out["audio"] = {**audio, "transcript": transcript}
        changed = any(out[k] is not extra[k] and out[k] != extra[k] for k in out)
        return out if changed else None


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

"""PII scrubbing for the transforming layer (ARCHITECTURE.md#layers).

``PIIScrubber`` is a message transform: ``TransformingChatStorage(inner, PIIScrubber())``
replaces e-mail addresses, phone numbers, payment cards, IBANs, US SSNs, IP addresses,
secrets (API keys, JWTs, private keys, passwords in URLs), dates of birth, street addresses
and ZIP codes, JSON fields whose key names the entity (``"dob"``, ``"zip"``, ``"first_name"``),
plus any values the application knows are PII, with keyed-hash placeholders before anything
reaches the inner store.

Modules: ``scrubber`` (the transform), ``run`` (one batch's scrubbing), ``fields`` (which
fields of a message carry text), ``detectors`` / ``phone`` / ``credentials`` /
``freetext`` (the rules), ``prefilter`` (which rules can match a text, checked first),
``keyed`` (JSON key names), ``protected`` (what is never PII, and the per-text view),
``known_values``, ``placeholders``, ``payloads`` (JSON value by value), ``spans`` (overlap
resolution), ``ner`` (the optional recognizer protocol and its spaCy / Presidio adapters).
"""

from storage.pii.detectors import Detector, RegexDetector, iban_is_valid, luhn_is_valid
from storage.pii.keyed import DEFAULT_JSON_KEYS
from storage.pii.ner import EntityRecognizer, PresidioRecognizer, SpacyRecognizer
from storage.pii.scrubber import (
    BUILTIN_ENTITIES,
    SECRET_ENTITIES,
    SECRET_ENV,
    Mode,
    PIIScrubber,
)
from storage.pii.spans import Detection

__all__ = [
    "BUILTIN_ENTITIES",
    "DEFAULT_JSON_KEYS",
    "SECRET_ENTITIES",
    "SECRET_ENV",
    "Detection",
    "Detector",
    "EntityRecognizer",
    "Mode",
    "PIIScrubber",
    "PresidioRecognizer",
    "RegexDetector",
    "SpacyRecognizer",
    "iban_is_valid",
    "luhn_is_valid",
]

"""PII scrubbing for the transforming layer (DESIGN.md §5).

``PIIScrubber`` is a message transform: ``TransformingChatStorage(inner, PIIScrubber())``
replaces e-mail addresses, phone numbers, payment cards, IBANs, US SSNs, IP addresses and
secrets (API keys, JWTs, private keys, passwords in URLs), plus any values the application
knows are PII, with keyed-hash placeholders before anything reaches the inner store.

Modules: ``scrubber`` (the transform), ``detectors`` / ``phone`` / ``credentials`` (the
rules), ``protected`` (what is never PII), ``known_values``, ``placeholders``, ``payloads``
(JSON value by value), ``spans`` (overlap resolution), ``ner`` (optional recognizer protocol).
"""

from storage.pii.detectors import Detector, RegexDetector, iban_is_valid, luhn_is_valid
from storage.pii.ner import EntityRecognizer
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
    "SECRET_ENTITIES",
    "SECRET_ENV",
    "Detection",
    "Detector",
    "EntityRecognizer",
    "Mode",
    "PIIScrubber",
    "RegexDetector",
    "iban_is_valid",
    "luhn_is_valid",
]

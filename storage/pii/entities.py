"""The entities a :class:`~storage.pii.PIIScrubber` finds: the built-in detectors by entity
name, the choice among them, and custom detectors turned into span finders."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator
from typing import Final

from storage.errors import ConfigError
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
from storage.pii.freetext import find_dates_of_birth, find_street_addresses, find_zip_codes
from storage.pii.phone import find_phone_numbers
from storage.pii.placeholders import ENTITY_NAME_RE
from storage.pii.protected import TextView

__all__ = [
    "BUILTIN_ENTITIES",
    "BUILTIN_FINDERS",
    "SECRET_ENTITIES",
    "CustomDetector",
    "adapt_detector",
    "check_entity",
    "choose_entities",
]

# Built-in detectors, strongest first: when overlapping detections are equally long, the
# earlier entity names the merged span.
BUILTIN_FINDERS: Final[dict[str, SpanFinder]] = {
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
BUILTIN_ENTITIES: Final = tuple(BUILTIN_FINDERS)
#: The credential entities among them.
SECRET_ENTITIES: Final = frozenset({"PRIVATE_KEY", "JWT", "API_KEY", "PASSWORD"})

#: What ``detectors=`` accepts per entity: a regex (source or compiled), a ``RegexDetector``
#: (regex + validator), or any callable ``text -> iterable of (start, end)``.
CustomDetector = Detector | RegexDetector | re.Pattern[str] | str


_NOT_A_DETECTOR: Final = (
    "; names and places have no rule-based detector: they are found under name keys of tool "
    "data (json_keys), in known_values, or by the NER recognizer (recognizer=)"
)


def choose_entities(entities: Iterable[str] | None) -> list[str]:
    """The built-in entities to find: all of them for ``None``.

    Raises:
        ConfigError: one string instead of names; an unknown name (with a did-you-mean hint).
    """
    if entities is None:
        return list(BUILTIN_ENTITIES)
    if isinstance(entities, str):
        raise ConfigError("entities must be an iterable of names, not one string")
    chosen = []
    for name in entities:
        if name not in BUILTIN_FINDERS:
            hint = [n for n in BUILTIN_ENTITIES if str(name).upper() in n]
            hint = hint or difflib.get_close_matches(str(name), BUILTIN_ENTITIES, n=1)
            raise ConfigError(
                f"unknown PII entity {name!r}"
                + (f"; did you mean {hint[0]!r}?" if hint else "")
                + f" (known: {', '.join(BUILTIN_ENTITIES)})"
                + (_NOT_A_DETECTOR if name in ("PERSON", "LOCATION") else "")
            )
        chosen.append(name)
    return chosen


def check_entity(name: object, what: str) -> str:
    """``name`` itself when it is an upper-case entity name.

    Raises:
        ConfigError: it is not (``what`` names where it came from).
    """
    if not isinstance(name, str) or ENTITY_NAME_RE.fullmatch(name) is None:
        raise ConfigError(f"{what} {name!r} must be an upper-case name like 'PERSON'")
    return name


def adapt_detector(name: str, detector: object) -> SpanFinder:
    """Turn a custom detector (pattern, RegexDetector or span callable) into a SpanFinder.

    Raises:
        ConfigError: ``detector`` is none of those; (when it runs) it returns a span outside
            the text.
    """
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

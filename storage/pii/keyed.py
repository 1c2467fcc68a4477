"""JSON fields whose key names the entity: ``{"dob": "1990-04-05", "zip": "78750"}``.

In a tool's arguments or result the key says what a value is, where free-text rules would
have to guess: a bare ``"78750"`` is a ZIP code only because its key is ``"zip"``. A string
(or number) value directly under such a key is replaced whole, as one placeholder of that
entity. Keys are matched case-insensitively, ignoring ``_``, ``-``, spaces and dots, so
``birth_date``, ``birthDate`` and ``Birth-Date`` are one key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Final

from storage.errors import ConfigError
from storage.pii.placeholders import ENTITY_NAME_RE

__all__ = [
    "DEFAULT_JSON_KEYS",
    "KeyEntities",
    "compile_json_keys",
    "is_one_value",
    "keyed_entity",
    "normalize_key",
]

#: The default key names per entity (already normalized: lower case, letters and digits).
DEFAULT_JSON_KEYS: Final[Mapping[str, tuple[str, ...]]] = {
    "DATE_OF_BIRTH": ("dob", "dateofbirth", "birthdate", "birthday", "birthdt", "bdate"),
    "STREET_ADDRESS": (
        "address1",
        "address2",
        "address3",
        "addressline1",
        "addressline2",
        "addressline3",
        "streetaddress",
        "street",
        "streetline1",
        "streetline2",
        "line1",
        "line2",
    ),
    "ZIP_CODE": ("zip", "zipcode", "postalcode", "postcode", "postal", "zip5", "zip4"),
    "PERSON": (
        "firstname",
        "lastname",
        "middlename",
        "fullname",
        "givenname",
        "familyname",
        "surname",
        "passengername",
        "customername",
        "cardholdername",
    ),
}
_NOT_KEY_CHAR: Final = re.compile(r"[\s_\-.]+")
_MAX_VALUE: Final = 200  # longer values are free text: scrubbed by the rules instead
_MAX_CACHED: Final = 4096
_ALNUM: Final = re.compile(r"[^\W_]")  # a letter or digit (str.isalnum)


@lru_cache(maxsize=4096)
def normalize_key(key: str) -> str:
    """``"Birth_Date"`` -> ``"birthdate"``."""
    return _NOT_KEY_CHAR.sub("", key).lower()


def compile_json_keys(keys: Mapping[str, Iterable[str]] | None) -> dict[str, str]:
    """``{entity: key names}`` -> ``{normalized key: entity}``.

    Raises:
        ConfigError: an entity name is not upper case, or a key name is not a string.
    """
    out: dict[str, str] = {}
    for entity, names in (DEFAULT_JSON_KEYS if keys is None else keys).items():
        if not isinstance(entity, str) or ENTITY_NAME_RE.fullmatch(entity) is None:
            raise ConfigError(f"json_keys entity {entity!r} must be an upper-case name")
        if isinstance(names, str):
            raise ConfigError(f"json_keys[{entity!r}] must be a list of key names, not a str")
        for name in names:
            if not isinstance(name, str) or not name:
                raise ConfigError(f"json_keys[{entity!r}] holds a key that is not a string")
            out[normalize_key(name)] = entity
    return out


def keyed_entity(keys: Mapping[str, str], key: str, value: str) -> str | None:
    """The entity of ``value`` under ``key``, or ``None`` (not a keyed field, empty, too long
    to be one value, or with no letter or digit)."""
    if not keys or not is_one_value(value):
        return None
    return keys.get(normalize_key(key))


def is_one_value(value: str) -> bool:
    """Whether ``value`` can be replaced whole under a keyed field: not empty, not too long
    to be one value, with a letter or digit."""
    return 0 < len(value) <= _MAX_VALUE and (value.isalnum() or _ALNUM.search(value) is not None)


class KeyEntities(dict[str, str | None]):
    """The entity each JSON object key names (``None``: none), by the key's text between its
    quotes as written in the document (escapes undecoded); filled on first look-up and
    bounded, so it serves every document a scrubber sees."""

    def __init__(self, keys: Mapping[str, str]) -> None:
        super().__init__()
        self._keys = keys

    def __missing__(self, literal: str) -> str | None:
        if len(self) >= _MAX_CACHED:
            self.clear()
        name = json.loads(f'"{literal}"') if "\\" in literal else literal
        entity = self[literal] = self._keys.get(normalize_key(name))
        return entity

"""Known values: PII the application already knows (its user's name, address, account id).

Rules cannot find names or street addresses, but the application holds its user's profile
and can pass the values by entity (``{"PERSON": ["Mia Li"], "USER_ID": ["mia_li_3668"]}``).
They are matched case-insensitively, on word boundaries (a value is not found inside a
longer word), with any run of whitespace matching the spaces inside a value, longest value
first. One compiled pattern per distinct set of values, cached.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from functools import lru_cache

from storage.errors import ConfigError
from storage.pii.placeholders import ENTITY_NAME_RE

__all__ = ["KnownValues", "freeze_known_values"]

FrozenValues = frozenset[tuple[str, str]]


def _norm(value: str) -> str:
    return " ".join(value.split()).casefold()


def freeze_known_values(values: Mapping[str, Iterable[str]] | None) -> FrozenValues:
    """Check ``{entity: values}`` and return it as a hashable set of ``(entity, value)``.

    Values that are empty or whitespace only are ignored.

    Raises:
        ConfigError: ``values`` is not a mapping, an entity name is not upper-case
            ``[A-Z][A-Z0-9_]*``, its values are a bare string or not an iterable of strings.
    """
    if values is None:
        return frozenset()
    if not isinstance(values, Mapping):
        raise ConfigError(f"known values must map entity -> values, got {type(values).__name__}")
    out: set[tuple[str, str]] = set()
    for entity, items in values.items():
        if not isinstance(entity, str) or ENTITY_NAME_RE.fullmatch(entity) is None:
            raise ConfigError(
                f"known-value entity {entity!r} must be upper case like 'PERSON' or 'USER_ID'"
            )
        if isinstance(items, str | bytes) or not isinstance(items, Iterable):
            raise ConfigError(
                f"known values for {entity} must be an iterable of strings, "
                f"got {type(items).__name__}"
            )
        for value in items:
            if not isinstance(value, str):
                raise ConfigError(
                    f"known value for {entity} must be a string, got {type(value).__name__}"
                )
            if value.strip():
                out.add((entity, value.strip()))
    return frozenset(out)


class KnownValues:
    """A matcher for a fixed set of ``(entity, value)`` pairs.

    When one value is listed under two entities, the entity that sorts first is used.
    """

    __slots__ = ("_entity_of", "_pattern")

    def __init__(self, pairs: FrozenValues) -> None:
        entity_of: dict[str, str] = {}
        for entity, value in sorted(pairs):
            entity_of.setdefault(_norm(value), entity)
        alternatives = []
        for value in sorted(entity_of, key=len, reverse=True):
            body = r"\s+".join(re.escape(part) for part in value.split(" "))
            head = r"(?<!\w)" if re.match(r"\w", value) else ""
            tail = r"(?!\w)" if re.search(r"\w$", value) else ""
            alternatives.append(head + body + tail)
        self._entity_of = entity_of
        self._pattern = re.compile("|".join(alternatives), re.IGNORECASE)

    def find(self, text: str) -> Iterator[tuple[int, int, str]]:
        """``(start, end, entity)`` for every occurrence of a known value in ``text``."""
        entity_of = self._entity_of
        for m in self._pattern.finditer(text):
            entity = entity_of.get(_norm(m.group()))
            if entity is None:  # casefold() and IGNORECASE disagree on a few letters
                entity = self._slow_lookup(m.group())
            yield m.start(), m.end(), entity

    def _slow_lookup(self, matched: str) -> str:
        for value, entity in self._entity_of.items():
            body = r"\s+".join(re.escape(part) for part in value.split(" "))
            if re.fullmatch(body, matched, re.IGNORECASE):
                return entity
        return min(self._entity_of.values())

    @staticmethod
    @lru_cache(maxsize=512)
    def compile(pairs: FrozenValues) -> KnownValues | None:
        """The cached matcher for ``pairs`` (``None`` when there are none)."""
        return KnownValues(pairs) if pairs else None

"""The built-in components the registry knows, for tests that walk every one of them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from storage.config.registry import KINDS, Kind, Registry
from storage.errors import ConfigError


def built_ins() -> Iterator[tuple[Kind, str, Any]]:
    """``(kind, name, factory)`` of every registered built-in (entry points left out); one
    whose optional driver is not installed is skipped."""
    registry = Registry(entry_points=False)
    for kind in KINDS:
        for name in registry.names(kind):
            try:
                yield kind, name, registry.resolve(kind, name)
            except ConfigError:
                continue  # an optional driver that is not installed

"""Lazy package exports (PEP 562): a public name is imported from its module on first use.

``import storage`` stays light this way: stores, layers, the config machinery and the adapters
(with their drivers and frameworks) load only when a program touches them.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, names: Mapping[str, str], exported: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Module-level ``__getattr__`` and ``__dir__`` for ``package``.

    Args:
        package: the package's ``__name__``.
        names: public name -> module that defines it.
        exported: the package's ``__all__``.

    Returns:
        ``(__getattr__, __dir__)``; assign them at module level. A resolved name is cached in
        the package's namespace, so later lookups cost nothing.
    """
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exported))

    return __getattr__, __dir__

"""Small wording helpers for the ``chatlayers`` command's messages."""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, word: str, many: str | None = None) -> str:
    """``"1 conversation"``, ``"2 conversations"`` (``many`` for irregular plurals)."""
    return f"{count:,} {word if count == 1 else (many or word + 's')}"

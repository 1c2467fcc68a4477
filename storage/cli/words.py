"""Small wording helpers for the ``chatlayers`` command's messages."""

from __future__ import annotations

__all__ = ["duration", "plural"]


def plural(count: int, word: str, many: str | None = None) -> str:
    """``"1 conversation"``, ``"2 conversations"`` (``many`` for irregular plurals)."""
    return f"{count:,} {word if count == 1 else (many or word + 's')}"


def duration(seconds: float | None) -> str:
    """A latency for people: ``"812 µs"``, ``"3.56 ms"``, ``"12.82 s"`` (``"n/a"`` for
    ``None``): whole microseconds under 1 ms, else two decimals of ms or, from 1 s, of s."""
    if seconds is None:
        return "n/a"
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"

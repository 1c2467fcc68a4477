"""The table cells of a benchmark report: latencies, ratios to the floor, and which stores and
sizes a case measured."""

# ruff: noqa: RUF001  (the multiplication sign is the report's typography)

from __future__ import annotations

import math

from benchmarks.subjects import SQLiteFloor
from benchmarks.suite import Results

__all__ = ["case_names", "case_sizes", "fmt_ratio", "fmt_us", "ratio"]


def fmt_us(us: float | None) -> str:
    """A latency in µs, with the precision a table wants (a dash when not measured)."""
    if us is None or math.isnan(us):
        return "–"
    if us >= 100_000:
        return f"{us / 1000:,.0f} ms"
    if us >= 10_000:
        return f"{us / 1000:.1f} ms"
    if us >= 100:
        return f"{us:,.0f} µs"
    if us >= 10:
        return f"{us:.1f} µs"
    return f"{us:.2f} µs"


def fmt_ratio(r: float | None) -> str:
    """A ratio to the floor (``""`` when not measured)."""
    if r is None or math.isnan(r):
        return ""
    if r >= 100:
        return f"{r:,.0f}×"
    if r >= 10:
        return f"{r:.0f}×"
    return f"{r:.2f}×"


def ratio(results: Results, case: str, size: int, name: str) -> float | None:
    """``name``'s median over its floor's, for one case and size (``None``: not both)."""
    mine = results.median(case, size, name)
    floor = results.median(case, size, results.floor_of.get((case, name), SQLiteFloor.name))
    if mine is None or not floor:
        return None
    return mine / floor


def case_names(results: Results, case: str) -> list[str]:
    """The stores measured in ``case``, in the order of the subjects."""
    seen: list[str] = []
    for c, _, name in results.samples:
        if c == case and name not in seen:
            seen.append(name)
    order = {s.name: i for i, s in enumerate(results.subjects)}
    return sorted(seen, key=lambda n: order.get(n, 99))


def case_sizes(results: Results, case: str) -> list[int]:
    """The history lengths measured in ``case``, ascending."""
    return sorted({n for (c, n, _) in results.samples if c == case})

"""The performance targets of the report, each with the measured figure and a verdict."""

# ruff: noqa: RUF001  (the multiplication sign is the report's typography)

from __future__ import annotations

import math
import subprocess
import sys

from benchmarks.cells import case_sizes, fmt_ratio, fmt_us, ratio
from benchmarks.subjects import (
    OurSQLite,
    OurSQLiteCold,
    OurSQLiteFull,
    OurSummarizing,
    SQLiteFloor,
    SQLiteFloorFull,
)
from benchmarks.suite import BATCH, Results

__all__ = ["targets"]

# One target: what, the measured figure, met (None: cannot tell).
Row = tuple[str, str, bool | None]
Imports = list[tuple[str, str, float | None, str]]

_FETCH_CASES = ("fetch_all", "fetch_last", "crowded_all", "crowded_last")
_PEER_CASES = (
    "fetch_all",
    "fetch_last",
    "append_one",
    "append_batch",
    "crowded_all",
    "crowded_last",
)
_SERVER = ("chatlayers redis", "chatlayers postgres")


def targets(results: Results, imports: Imports) -> list[str]:
    """The targets as a markdown table: target, measured, met."""
    rows = [
        *_fetch_rows(results),
        *_flat_limit_rows(results),
        *_summarizing_rows(results),
        *_append_rows(results),
        *_batch_rows(results),
        _peer_row(results),
        *_import_rows(imports),
    ]
    out = ["| target | measured | met |", "|---|---|:---:|"]
    for what, measured, ok in rows:
        out.append(f"| {what} | {measured} | {'yes' if ok else 'NO' if ok is not None else '?'} |")
    return out


def _fetch_rows(results: Results) -> list[Row]:
    """Every embedded and every server store within 1.5x the floor in every fetch case."""
    rows: list[Row] = []
    for label, group in (
        (
            "embedded",
            [s.name for s in results.subjects if s.group == "ours" and s.name not in _SERVER],
        ),
        ("server", [s.name for s in results.subjects if s.name in _SERVER]),
    ):
        worst: list[str] = []
        ok_all = True
        for name in group:
            found = _worst_fetch(results, name)
            if found is None:
                continue
            r, c, n = found
            ok_all = ok_all and r <= 1.5
            worst.append(f"{name}: worst {fmt_ratio(r)} ({c}, n={n:,})")
        if worst:
            rows.append(
                (
                    f"every {label} store ≤ 1.5× the floor at every size (fetches)",
                    "; ".join(worst),
                    ok_all,
                )
            )
    return rows


def _worst_fetch(results: Results, name: str) -> tuple[float, str, int] | None:
    """``name``'s highest ratio to the floor over the fetch cases: (ratio, case, size)."""
    found = [
        (value, c, n)
        for c in _FETCH_CASES
        for n in case_sizes(results, c)
        if (value := ratio(results, c, n, name)) is not None
    ]
    return max(found) if found else None


def _flat_limit_rows(results: Results) -> list[Row]:
    rows: list[Row] = []
    for name in (OurSQLite.name, OurSQLiteCold.name):
        sizes = case_sizes(results, "fetch_last")
        a, b = (
            results.median("fetch_last", 100, name),
            results.median("fetch_last", max(sizes), name),
        )
        if a and b:
            rows.append(
                (
                    f"`limit` reads flat from 100 to {max(sizes):,} ({name})",
                    f"{fmt_us(a)} → {fmt_us(b)} ({b / a:.2f}×)",
                    b / a <= 1.25,
                )
            )
    return rows


def _summarizing_rows(results: Results) -> list[Row]:
    meds = [
        m
        for c in ("fetch_all", "fetch_last")
        for n in case_sizes(results, c)
        if (m := results.median(c, n, OurSummarizing.name)) is not None
    ]
    if not meds:
        return []
    return [
        (
            "active summarizing buffer fetch < 10 µs at any raw length",
            f"max median {fmt_us(max(meds))}",
            max(meds) < 10,
        )
    ]


def _append_rows(results: Results) -> list[Row]:
    rows: list[Row] = []
    for ours_name, floor, label in (
        (OurSQLiteFull.name, SQLiteFloorFull.name, "synchronous=full (fsync)"),
        (OurSQLite.name, SQLiteFloor.name, "synchronous=normal (default)"),
    ):
        rs = [
            (results.median("append_one", n, ours_name) or math.nan)
            / (results.median("append_one", n, floor) or math.nan)
            for n in case_sizes(results, "append_one")
        ]
        rs = [x for x in rs if not math.isnan(x)]
        if rs:
            rows.append(
                (
                    f"single append ≤ 1.2× the WAL floor, {label}",
                    f"worst {fmt_ratio(max(rs))}",
                    max(rs) <= 1.2,
                )
            )
    return rows


def _batch_rows(results: Results) -> list[Row]:
    rates = [
        BATCH / (m / 1e6)
        for n in case_sizes(results, "append_batch")
        if (m := results.median("append_batch", n, OurSQLite.name))
    ]
    if not rates:
        return []
    return [
        (
            "batch append ≥ 50,000 msg/s (sqlite, default)",
            f"slowest {min(rates):,.0f} msg/s",
            min(rates) >= 50_000,
        )
    ]


def _peer_row(results: Results) -> Row:
    losses = []
    for peer in (s for s in results.subjects if s.group == "peer"):
        mine_name = peer.counterpart
        for case in _PEER_CASES:
            for n in case_sizes(results, case):
                mine = results.median(case, n, mine_name)
                theirs = results.median(case, n, peer.name)
                if mine is not None and theirs is not None and theirs < mine:
                    losses.append(
                        f"{peer.name} vs {mine_name}, {case} n={n:,}: "
                        f"{fmt_us(theirs)} vs {fmt_us(mine)}"
                    )
    return (
        "faster than every peer, every case and size (each peer against the "
        "chatlayers store of its kind: SQL → sqlite, file → jsonl, memory → memory, "
        "summarizing → summarizing)",
        "; ".join(losses) or "no peer faster anywhere",
        not losses,
    )


def _import_rows(imports: Imports) -> list[Row]:
    storage_ms = next((ms for label, _, ms, _ in imports if label == "chatlayers"), None)
    if storage_ms is None:
        return []
    litellm = _litellm_imported()
    return [
        (
            "`import storage` < 150 ms, without litellm",
            f"{storage_ms:.0f} ms, litellm imported: {litellm}",
            storage_ms < 150 and not litellm,
        )
    ]


def _litellm_imported() -> bool:
    code = "import sys, storage; print('litellm' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    return proc.stdout.strip() == "True"

"""Measurement: warm-up, interleaved rounds, per-call samples, medians and p99."""

from __future__ import annotations

import gc
import math
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

Op = Callable[[], Any]  # sync op, or async op returning an awaitable

_now = time.perf_counter_ns


@dataclass
class Samples:
    """Per-call latencies of one (case, size, subject), in nanoseconds."""

    ns: list[int] = field(default_factory=list)
    note: str = ""

    @property
    def median_us(self) -> float:
        return statistics.median(self.ns) / 1000 if self.ns else math.nan

    @property
    def p99_us(self) -> float:
        if not self.ns:
            return math.nan
        ordered = sorted(self.ns)
        return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)] / 1000


async def call_n(op: Op, is_async: bool, n: int, out: list[int]) -> None:
    """Call ``op`` ``n`` times, appending each call's latency (ns) to ``out``."""
    now = _now
    if is_async:
        for _ in range(n):
            t = now()
            await op()
            out.append(now() - t)
    else:
        for _ in range(n):
            t = now()
            op()
            out.append(now() - t)


@dataclass
class Contender:
    """One subject's operation in an interleaved measurement."""

    name: str
    op: Op
    is_async: bool
    before_round: Callable[[int], Awaitable[None]] | None = None  # untimed, gets the call count
    samples: Samples = field(default_factory=Samples)
    calls: int = 1


async def interleaved(
    contenders: list[Contender],
    *,
    rounds: int,
    round_budget_s: float,
    max_calls: int,
    seed: int = 0,
) -> None:
    """Measure every contender in ``rounds`` rounds, shuffling their order each round.

    A warm-up call per contender sizes its calls per round (as many as fit in
    ``round_budget_s``, between 1 and ``max_calls``) and is not recorded. Garbage collection
    stays enabled (it is part of a real read); young garbage is collected before each
    contender's turn (and everything once per round) so one contender's garbage is not
    collected on another's clock.
    """
    rng = random.Random(seed)
    for c in contenders:
        if c.before_round is not None:
            await c.before_round(1)
        warm: list[int] = []
        await call_n(c.op, c.is_async, 1, warm)
        per_call_s = max(warm[0] / 1e9, 1e-7)
        c.calls = max(1, min(max_calls, int(round_budget_s / per_call_s)))
    order = list(contenders)
    for _ in range(rounds):
        rng.shuffle(order)
        gc.collect()
        for c in order:
            if c.before_round is not None:
                await c.before_round(c.calls)
            gc.collect(1)  # young garbage only: a full pass costs ~0.1 s on a big heap
            await call_n(c.op, c.is_async, c.calls, c.samples.ns)

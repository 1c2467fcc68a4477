"""The cases, run over every subject that can run them, interleaved, on the same data."""

from __future__ import annotations

import gc
import itertools
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from benchmarks.data import Wire, history
from benchmarks.peers import PEERS
from benchmarks.subjects import FLOORS, OURS, SQLiteFloor, SQLiteFloorFull, Subject, Unavailable
from benchmarks.timing import Contender, Samples, interleaved

FETCH_CASES = ("fetch_all", "fetch_last", "crowded_all", "crowded_last")
APPEND_CASES = ("append_one", "append_batch")
LIMIT = 20
BATCH = 100
CROWD_CHUNK = 20


@dataclass
class Config:
    sizes: tuple[int, ...] = (10, 100, 1_000, 10_000)
    our_sizes: tuple[int, ...] = (100_000,)  # extra sizes for our stores and the floors
    crowd_rows: int = 20_000  # rows of other sessions in the crowded database
    crowd_sizes: tuple[int, ...] = (10, 100, 1_000, 10_000)
    sessions: int = 100  # concurrent sessions
    session_size: int = 100  # messages in each
    rounds: int = 5
    big_rounds: int = 3  # rounds at sizes above 10,000 (whole reads take ~1 s there)
    append_rounds: int = 12  # single appends: more, shorter rounds (fsync times drift)
    round_budget_s: float = 0.015
    max_calls: int = 100
    max_appends: int = 8  # per round: appends grow the history they measure
    max_batches: int = 4
    peers: bool = True
    quick: bool = False

    @classmethod
    def quick_run(cls) -> Config:
        return cls(
            sizes=(10, 1_000),
            our_sizes=(),
            crowd_rows=2_000,
            crowd_sizes=(10, 1_000),
            sessions=20,
            session_size=20,
            rounds=3,
            append_rounds=3,
            round_budget_s=0.005,
            max_calls=30,
            max_appends=5,
            max_batches=1,
            quick=True,
        )


@dataclass
class Results:
    config: Config
    samples: dict[tuple[str, int, str], Samples] = field(default_factory=dict)
    concurrent: dict[str, dict[str, float]] = field(default_factory=dict)
    subjects: list[Subject] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    floor_of: dict[tuple[str, str], str] = field(default_factory=dict)  # (case, subject) -> floor
    setup_s: float = 0.0
    measure_s: float = 0.0
    extra_notes: list[str] = field(default_factory=list)

    def median(self, case: str, size: int, name: str) -> float | None:
        s = self.samples.get((case, size, name))
        return s.median_us if s and s.ns else None


def _log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name.lower()).strip("_")


def floor_name(subject: Subject, case: str) -> str:
    if case in APPEND_CASES:
        return SQLiteFloorFull.name if subject.durable else SQLiteFloor.name
    return SQLiteFloor.name


class Source:
    """Fresh messages for appends: the shipped ones, cycled from a moving offset."""

    def __init__(self) -> None:
        self.offset = itertools.count(1000)

    def __call__(self, n: int) -> list[Wire]:
        return history(n, next(self.offset))


async def _open(
    cls: type[Subject], workdir: Path, results: Results, tag: str = ""
) -> Subject | None:
    name = cls.name + tag
    try:
        subject = cls(workdir)
        await subject.open()
        return subject
    except Unavailable as exc:
        results.skipped.setdefault(name, str(exc))
    except Exception as exc:  # a peer that cannot start here is reported, not fatal
        results.skipped.setdefault(name, f"failed to start: {type(exc).__name__}: {exc}")
    return None


async def _load(subject: Subject, key: str, wires: list[Wire], results: Results) -> bool:
    try:
        await subject.load(key, wires)
        return True
    except Exception as exc:
        results.skipped.setdefault(
            subject.name, f"failed to load data: {type(exc).__name__}: {exc}"
        )
        return False


def _sizes_for(subject: Subject, config: Config, append: bool = False) -> list[int]:
    limit = subject.max_size
    if append and subject.append_max_size is not None:
        limit = subject.append_max_size
    return [n for n in (*config.sizes, *config.our_sizes) if n <= limit]


async def setup(
    config: Config, workdir: Path, results: Results
) -> tuple[list[Subject], list[Subject]]:
    """Open every subject and load the same histories into each; returns (main, crowded)."""
    classes = [*FLOORS, *OURS, *(PEERS if config.peers else ())]
    main: list[Subject] = []
    by_class: dict[type[Subject], Subject] = {}
    for cls in classes:
        owner = by_class.get(cls.shares) if cls.shares else None
        if cls.shares and owner is None:
            results.skipped[cls.name] = f"needs {cls.shares.name}"
            continue
        subject = await _open(cls, owner.workdir if owner else workdir / _slug(cls.name), results)
        if subject is None:
            continue
        t = time.perf_counter()
        if not cls.shares and not await _load_histories(subject, config, results):
            await _close(subject)
            continue
        _log(f"loaded {cls.name} in {time.perf_counter() - t:.1f} s")
        main.append(subject)
        by_class[cls] = subject
    crowded: list[Subject] = []
    for subject in main:
        if "crowded" in subject.cases:
            other = await _open_crowded(subject, crowded, config, workdir, results)
            if other is not None:
                crowded.append(other)
    return main, crowded


async def _load_histories(subject: Subject, config: Config, results: Results) -> bool:
    """Load the histories ``subject``'s cases read; stops at the first that fails."""
    ok = True
    if "fetch_all" in subject.cases or "fetch_last" in subject.cases:
        for n in _sizes_for(subject, config):
            ok = ok and await _load(subject, f"h{n}", history(n), results)
    else:
        for n in _sizes_for(subject, config, append=True):
            ok = ok and await _load(subject, f"h{n}", history(n), results)
    if "concurrent" in subject.cases:
        for i in range(config.sessions):
            ok = ok and await _load(subject, f"p{i}", history(config.session_size, i), results)
    return ok


async def _open_crowded(
    subject: Subject, crowded: list[Subject], config: Config, workdir: Path, results: Results
) -> Subject | None:
    """A second instance of ``subject``'s class over a crowded database (one that shares
    another subject's data opens the crowded one of that subject); ``None`` when it fails."""
    cls = type(subject)
    if cls.shares:
        owner = next((c for c in crowded if type(c) is cls.shares), None)
        if owner is None:
            return None
        return await _open(cls, owner.workdir, results, " (crowded)")
    other = await _open(cls, workdir / (_slug(cls.name) + "_crowded"), results, " (crowded)")
    if other is None:
        return None
    t = time.perf_counter()
    if not await _load_crowded(other, config, results):
        await _close(other)
        return None
    _log(f"loaded {cls.name} (crowded) in {time.perf_counter() - t:.1f} s")
    return other


async def _load_crowded(subject: Subject, config: Config, results: Results) -> bool:
    """The measured histories interleaved, a turn or so at a time, with other sessions' rows."""
    streams: list[tuple[str, list[Wire]]] = [(f"c{n}", history(n)) for n in config.crowd_sizes]
    others = config.crowd_rows // 100
    streams += [(f"o{i}", history(100, 7 + i)) for i in range(others)]
    pos = [0] * len(streams)
    rng = random.Random(1)
    live = list(range(len(streams)))
    while live:
        i = rng.choice(live)
        key, wires = streams[i]
        chunk = wires[pos[i] : pos[i] + CROWD_CHUNK]
        pos[i] += CROWD_CHUNK
        if pos[i] >= len(wires):
            live.remove(i)
        if not await _load(subject, key, chunk, results):
            return False
    return True


def _checkpoint(workdir: Path) -> None:
    """Fold every SQLite WAL written by setup into its database, so that no store's first
    timed commit pays for checkpointing another's bulk load."""
    import sqlite3

    for path in workdir.rglob("*.db"):
        try:
            with sqlite3.connect(path) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as exc:
            _log(f"checkpoint {path}: {exc}")


async def _close(subject: Subject) -> None:
    try:
        await subject.close()
    except Exception as exc:
        _log(f"closing {subject.name}: {exc!r}")


async def measure(
    config: Config, main: list[Subject], crowded: list[Subject], results: Results
) -> None:
    source = Source()
    sizes = sorted({*config.sizes, *config.our_sizes})
    plan: list[tuple[str, list[Subject]]] = [
        ("fetch_all", main),
        ("fetch_last", main),
        ("append_one", main),
        ("append_batch", main),
        ("crowded_all", crowded),
        ("crowded_last", crowded),
    ]
    for case, pool in plan:
        crowd = case.startswith("crowded")
        for n in sizes if not crowd else config.crowd_sizes:
            contenders: list[Contender] = []
            for s in pool:
                needed = "crowded" if crowd else case
                if needed not in s.cases:
                    continue
                if case in APPEND_CASES:
                    if n not in _sizes_for(s, config, append=True):
                        continue
                    if case == "append_batch" and n > s.batch_max_size:
                        results.extra_notes.append(
                            f"{s.name}: batch append at n={n:,} not measured ({s.batch_note})."
                        )
                        continue
                elif not crowd and n not in _sizes_for(s, config):
                    continue
                contenders.append(_contender(s, case, n, source, config))
            if not contenders:
                continue
            t = time.perf_counter()
            await interleaved(
                contenders,
                rounds=_rounds(case, n, config),
                round_budget_s=config.round_budget_s,
                max_calls=_max_calls(case, config),
            )
            for c in contenders:
                results.samples[(case, n, c.name)] = c.samples
                results.floor_of[(case, c.name)] = floor_name(_by_name(pool, c.name), case)
            _log(f"{case} n={n}: {len(contenders)} subjects, {time.perf_counter() - t:.1f} s")
            gc.collect()
    await _concurrent(config, main, results)


def _rounds(case: str, n: int, config: Config) -> int:
    if case == "append_one":
        return config.append_rounds
    return config.rounds if n <= 10_000 else config.big_rounds


def _by_name(pool: list[Subject], name: str) -> Subject:
    return next(s for s in pool if s.name == name)


def _max_calls(case: str, config: Config) -> int:
    if case == "append_one":
        return config.max_appends
    if case == "append_batch":
        return config.max_batches
    return config.max_calls


def _contender(s: Subject, case: str, n: int, source: Source, config: Config) -> Contender:
    if case in ("fetch_all", "crowded_all"):
        key = f"h{n}" if case == "fetch_all" else f"c{n}"
        return Contender(s.name, s.fetch_op(key, None), s.is_async)
    if case in ("fetch_last", "crowded_last"):
        key = f"h{n}" if case == "fetch_last" else f"c{n}"
        return Contender(s.name, s.fetch_op(key, LIMIT), s.is_async)
    # Appends go to the fetch cases' histories: those cases have run by then.
    if case == "append_one":
        op, prepare = s.append_op(f"h{n}", 1, source)
    else:
        op, prepare = s.append_op(f"h{n}", BATCH, source)
    return Contender(s.name, op, s.is_async, before_round=prepare)


async def _concurrent(config: Config, main: list[Subject], results: Results) -> None:
    """``sessions`` fetches of whole histories started at once; latency = finish - start."""
    subjects = [s for s in main if "concurrent" in s.cases]
    lat: dict[str, list[int]] = {s.name: [] for s in subjects}
    wall: dict[str, list[int]] = {s.name: [] for s in subjects}
    ops = {s.name: [s.fetch_op(f"p{i}", None) for i in range(config.sessions)] for s in subjects}
    now = time.perf_counter_ns
    rng = random.Random(2)
    t_all = time.perf_counter()
    for _ in range(config.rounds + 1):  # first round is warm-up
        order = list(subjects)
        rng.shuffle(order)
        for s in order:
            gc.collect()
            out: list[int] = []
            t0 = now()
            if s.is_async:

                async def one(op: Callable[[], Any], t0: int = t0, out: list[int] = out) -> None:
                    await op()
                    out.append(now() - t0)

                async with anyio.create_task_group() as tg:
                    for op in ops[s.name]:
                        tg.start_soon(one, op)
            else:
                for op in ops[s.name]:
                    op()
                    out.append(now() - t0)
            wall[s.name].append(now() - t0)
            lat[s.name].extend(out)
    first = {name: v[config.sessions :] for name, v in lat.items()}  # drop the warm-up round
    for name, values in first.items():
        sample = Samples(values)
        walls = Samples(wall[name][1:])
        results.concurrent[name] = {
            "p50_us": sample.median_us,
            "p99_us": sample.p99_us,
            "wall_us": walls.median_us,
        }
    _log(f"concurrent: {len(subjects)} subjects, {time.perf_counter() - t_all:.1f} s")


async def run(config: Config, workdir: Path) -> Results:
    results = Results(config)
    t = time.perf_counter()
    main, crowded = await setup(config, workdir, results)
    results.subjects = main
    _checkpoint(workdir)
    results.setup_s = time.perf_counter() - t
    gc.collect()
    gc.freeze()  # setup objects out of the collector's way
    t = time.perf_counter()
    try:
        await measure(config, main, crowded, results)
    finally:
        results.measure_s = time.perf_counter() - t
        for s in (*main, *crowded):
            await _close(s)
        for s in main:
            summarizer = getattr(s, "summarizer_name", None)
            if summarizer:
                results.extra_notes.append(f"{s.name} uses {summarizer}.")
        gc.unfreeze()
    return results

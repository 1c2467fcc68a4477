"""``python -m benchmarks [--quick] [--no-peers] [--start-servers] [--out DIR]``.

Runs every case, prints the markdown report and writes it with the plot to ``--out``.
Redis and PostgreSQL rows need a server: set ``CHATLAYERS_BENCH_REDIS_URL`` /
``CHATLAYERS_BENCH_POSTGRES_DSN``, or pass ``--start-servers`` (a checkout with ``tests/``:
throw-away local servers on loopback ports, as the test suite starts them).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

import anyio

from benchmarks.breakdown import measure as breakdown
from benchmarks.report import import_times, markdown, plot
from benchmarks.suite import Config, run

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smoke run (about a minute)")
    parser.add_argument("--no-peers", action="store_true", help="only chatlayers and the floors")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"output folder ({RESULTS})")
    parser.add_argument("--workdir", type=Path, help="where databases go (default: a temp dir)")
    parser.add_argument(
        "--start-servers",
        action="store_true",
        help="start throw-away redis-server and PostgreSQL for their rows (needs tests/)",
    )
    args = parser.parse_args(argv)
    config = Config.quick_run() if args.quick else Config()
    config.peers = not args.no_peers
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="chatlayers-bench-") as tmp,
        contextlib.ExitStack() as servers,
    ):
        workdir = args.workdir or Path(tmp)
        notes = _start_servers(servers, Path(tmp)) if args.start_servers else []
        results = anyio.run(run, config, workdir, backend="asyncio")
        results.extra_notes.extend(notes)
    imports = import_times(1 if args.quick else 3)
    steps = breakdown(3 if args.quick else 15)
    args.out.mkdir(parents=True, exist_ok=True)
    name = "quick" if args.quick else "latest"
    png = args.out / ("fetch_latency_quick.png" if args.quick else "fetch_latency.png")
    plot(results, png)
    text = markdown(results, imports, png.name, steps)
    (args.out / f"{name}.md").write_text(text, encoding="utf-8")
    print(text)
    print(
        f"[bench] wrote {args.out / (name + '.md')} and {png} in "
        f"{time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )
    return 0


def _start_servers(stack: contextlib.ExitStack, tmp: Path) -> list[str]:
    """Start local servers with the test suite's helpers; a missing binary is only noted."""
    notes: list[str] = []
    try:
        from tests.servers import PostgresServer, RedisServer
    except ImportError as exc:
        return [f"--start-servers needs the repository's tests/ package: {exc}"]
    for env, make, what in (
        ("CHATLAYERS_BENCH_REDIS_URL", lambda: RedisServer(tmp / "redis"), "redis"),
        ("CHATLAYERS_BENCH_POSTGRES_DSN", PostgresServer, "postgres"),
    ):
        if os.environ.get(env):
            continue
        try:
            server = make()
            server.start()
        except BaseException as exc:  # the helpers call pytest.skip when a binary is missing
            if isinstance(exc, KeyboardInterrupt):
                raise
            notes.append(f"--start-servers: {what} did not start: {exc}")
            continue
        stack.callback(server.stop)
        os.environ[env] = str(getattr(server, "url", None) or getattr(server, "dsn", ""))
        notes.append(
            "redis-server started by --start-servers on loopback (AOF, appendfsync everysec)"
            if what == "redis"
            else "PostgreSQL started by --start-servers on loopback with the test suite's "
            "settings (fsync=off, full_page_writes=off): its appends are not durable there"
        )
    return notes


if __name__ == "__main__":
    raise SystemExit(main())

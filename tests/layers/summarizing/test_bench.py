"""``python -m benchmarks.coherence --quick`` runs end to end (timings are not judged here;
the call counts are: they are behaviour, not speed)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.paths import REPO


@pytest.mark.slow
def test_coherence_benchmark_quick_run() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("CHATLAYERS_BENCH_REDIS_URL", None)
    env.pop("CHATLAYERS_BENCH_POSTGRES_DSN", None)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.coherence", "--quick", "--messages", "200"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for store in ("memory", "sqlite", "jsonl"):
        assert re.search(rf"^\| {store} \|", out, re.M), store
    shared = re.search(r"^\| store \| (\d+) \| (\d+) \| (\d+) \|$", out, re.M)
    assert shared is not None, out
    calls, crossings, restart = map(int, shared.groups())
    assert calls == crossings > 0  # one summarizer call per crossing, fleet-wide
    assert restart == 0  # a restarted worker serves the stored summary

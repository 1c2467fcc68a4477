"""The benchmark runner works end to end (a quick run; its timings are not judged here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO


def test_quick_benchmark_writes_report_and_plot(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("CHATLAYERS_BENCH_REDIS_URL", None)
    env.pop("CHATLAYERS_BENCH_POSTGRES_DSN", None)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--no-peers", "--out", str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reports = list(tmp_path.glob("*.md"))
    assert reports, list(tmp_path.iterdir())
    text = reports[0].read_text(encoding="utf-8")
    for row in (
        "floor: sqlite3 + json.loads",
        "**chatlayers sqlite**",
        "**chatlayers jsonl**",
        "**summarize::scrub::sqlite (active)**",
        "## Targets",
    ):
        assert row in text, row
    assert list(tmp_path.glob("*.png"))


def test_scrub_cost_benchmark_reports_the_ratio_to_the_floor() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.scrub_cost", "--quick"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for row in (
        "**shipped messages**",
        "**agent messages**",
        "| floor: sqlite3 + json.loads |",
        "| scrub::sqlite |",
        "| PIIScrubber alone (no store) |",
        "scrub::sqlite / floor:",
    ):
        assert row in done.stdout, row

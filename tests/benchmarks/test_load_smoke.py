"""``python -m benchmarks.load --quick`` works end to end over SQLite and loses nothing (its
timings are not judged here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO


def test_quick_load_run_writes_results_with_no_error_and_no_lost_message(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("CHATLAYERS_BENCH_REDIS_URL", None)
    env.pop("CHATLAYERS_BENCH_POSTGRES_DSN", None)
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.load", "--quick", "--out", str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "load_quick.json").read_text(encoding="utf-8"))
    rows = data["rows"]
    assert [(r["store"], r["processes"]) for r in rows] == [("sqlite", 1), ("sqlite", 2)]
    for row in rows:
        assert row["errors"] == 0, row["first_error"]
        assert row["lost"] == 0
        assert row["turns"] == row["processes"] * 2 * 8
        assert row["crossings"] > 0  # the budget is crossed: summaries were made
        assert row["summarizer_calls"] >= row["crossings"]
    text = (tmp_path / "load_quick.md").read_text(encoding="utf-8")
    assert "| sqlite | 2 |" in text
    assert (tmp_path / "load_quick.png").stat().st_size > 0


def test_the_check_counts_a_missing_and_a_reordered_message(tmp_path: Path) -> None:
    import anyio

    from benchmarks.load import _check, conversation_key, turn_messages
    from storage import open_storage

    url = f"sqlite:///{tmp_path / 'check.db'}"

    async def fill() -> None:
        async with open_storage(url) as store:
            first = turn_messages("r", 0, 0, 0) + turn_messages("r", 0, 0, 1)
            await store.save_messages(conversation_key("r", 0, 0), first[:3])  # one missing
            second = turn_messages("r", 0, 1, 0) + turn_messages("r", 0, 1, 1)
            await store.save_messages(
                conversation_key("r", 0, 1), [second[1], second[0], *second[2:]]
            )

    anyio.run(fill)
    assert anyio.run(_check, url, "r", 1, 2, 2) == {"lost": 2, "crossings": 0}

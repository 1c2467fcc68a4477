"""What the CLI tests share: running ``chatlayers`` in process, a few shipped conversations."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.cli import main
from tests.paths import REPO

TAU = REPO / "examples" / "data" / "tau_bench_airline_gpt4o_trial0.openai.jsonl"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``chatlayers ARGV...`` in this process: (exit status, stdout, stderr)."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def few(tmp_path: Path, count: int = 6) -> Path:
    """The first ``count`` tau-bench conversations as a file of their own."""
    path = tmp_path / "few.openai.jsonl"
    path.write_text("\n".join(TAU.read_text().splitlines()[:count]) + "\n")
    return path

"""What the CLI tests share: running ``chatlayers`` in process, a few shipped conversations."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
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


def console_script() -> Path:
    """The installed ``chatlayers`` console script (the test is skipped without one): the
    path a user takes, which does not import from the current directory."""
    script = Path(sys.executable).with_name("chatlayers")
    if not script.exists():
        pytest.skip("the console script is not installed in this environment")
    return script


def run_script(
    argv: list[str], cwd: Path, env: Mapping[str, str]
) -> subprocess.CompletedProcess[str]:
    """``chatlayers ARGV...`` through the console script in ``cwd`` with only ``env`` (and
    the script's directory on ``PATH``)."""
    script = console_script()
    return subprocess.run(
        [str(script), *argv],
        cwd=cwd,
        env={"PATH": str(script.parent), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

"""CI runs what the README promises: its Quick start test command, after the pre-commit hooks."""

from __future__ import annotations

import re

from tests.paths import REPO


def quick_start() -> list[str]:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None, "the Quick start has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_quick_start_has_two_commands_and_ci_runs_the_test_command() -> None:
    commands = quick_start()
    assert len(commands) == 2
    replay, tests = commands
    assert " replay " in replay
    assert "pytest" in tests
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line.strip()]
    assert ci[-1] == tests


def test_ci_runs_the_pre_commit_hooks_of_the_commit_stage() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert "pre-commit run --all-files" in ci
    config = (REPO / ".pre-commit-config.yaml").read_text()
    for hook in ("ruff check", "ruff format --check", "mypy"):
        assert f"entry: {hook}" in config

"""The Python examples of the README and of docs/ run (each in a fresh process in a temporary
directory).

Blocks that use a framework adapter are run by ``tests/adapters/test_examples.py``; the
protocol's signature listing is documentation, not code.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO, code_blocks, docs_text

BLOCKS = code_blocks("python")


def runnable() -> list[str]:
    out = []
    for block in BLOCKS:
        if block.startswith("class ChatStorage(Protocol)"):
            continue
        if "my_" in block or "storage.adapters" in block or "storage.sync" in block:
            continue
        out.append(block)
    return out


def test_readme_has_examples() -> None:
    assert len(runnable()) >= 2


@pytest.mark.parametrize("block", runnable(), ids=lambda b: b.splitlines()[0][:40])
def test_readme_example_runs(block: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CHATLAYERS_PII_SECRET": "readme"}
    done = subprocess.run(
        [sys.executable, "-c", block],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


EXPORT_DEFAULTS = re.compile(
    r"By default `jsonl` and `json` export the (raw record|model view) and `md` the "
    r"(raw record|model view); `--raw` or `--model-view` picks either for any format"
)


def test_readme_says_what_each_export_format_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from storage.cli import main

    monkeypatch.setenv("CHATLAYERS_PII_SECRET", "readme")
    row = next(line for line in docs_text().splitlines() if line.startswith("| `chatlayers export"))
    documented = EXPORT_DEFAULTS.search(row)
    assert documented is not None, row
    source = tmp_path / "in.jsonl"
    source.write_text(
        '{"user_id": "u", "session_id": "s", "messages": [{"role": "user", "content": "hi"}, '
        '{"role": "assistant", "content": "hello"}]}\n'
    )
    url = f"summarize::sqlite:///{tmp_path}/c.db"
    assert main(["import", "--url", url, str(source)]) == 0
    summary = ["compact", "--url", url, "--user", "u", "--session", "s", "--summary", "Greeted."]
    assert main(summary) == 0  # now the view (1 message) differs from the record (2)
    capsys.readouterr()
    for fmt, default in (("jsonl", documented[1]), ("json", documented[1]), ("md", documented[2])):
        for flag, view in (
            ([], default),
            (["--raw"], "raw record"),
            (["--model-view"], "model view"),
        ):
            out = tmp_path / f"out.{fmt}"
            assert main(["export", "--url", url, "--format", fmt, *flag, "-o", str(out)]) == 0
            messages = "1 message" if view == "model view" else "2 messages"
            assert f"({messages}, {view}) to {out}" in capsys.readouterr().out, (fmt, flag)

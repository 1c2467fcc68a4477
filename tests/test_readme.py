"""The README's own Python examples run (each in a fresh process in a temporary directory).

Blocks that use a framework adapter are run by ``test_adapter_examples.py``; the protocol's
signature listing is documentation, not code.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.S)


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

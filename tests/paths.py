"""Where the repository's files are, for tests in any folder of tests/."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
"""The repository root (the folder holding ``pyproject.toml``)."""

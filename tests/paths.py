"""Where the repository's files are, for tests in any folder of tests/.

The user documentation is ``README.md`` plus the pages of ``docs/``; tests that run or compare
its examples read them through :func:`doc_files`, :func:`docs_text` and :func:`code_blocks`, so
an example moved from one page to another is still run.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
"""The repository root (the folder holding ``pyproject.toml``)."""

DOCS = REPO / "docs"
"""The reference pages the README links to."""


def doc_files() -> list[Path]:
    """``README.md`` first, then every ``docs/*.md`` page in name order."""
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


def docs_text() -> str:
    """The README and every docs page, one after the other (blank lines between pages)."""
    return "\n\n".join(path.read_text(encoding="utf-8") for path in doc_files())


def code_blocks(lang: str) -> list[str]:
    """The body of every fenced block of language ``lang`` (e.g. ``"python"``, ``"toml"``).

    In :func:`doc_files` order, each body without its fences and ending in a newline.
    """
    fence = re.compile(rf"^```{re.escape(lang)}\n(.*?)^```", re.S | re.M)
    return [
        block for path in doc_files() for block in fence.findall(path.read_text(encoding="utf-8"))
    ]

"""Every relative link of the README, docs/ and ARCHITECTURE.md reaches a file, and its anchor.

Anchors are the ones GitHub makes from headings: lower case, punctuation other than ``-`` and
``_`` dropped, spaces turned into ``-``, a repeated heading suffixed ``-1``, ``-2``, ...
Links inside fenced blocks and code spans are text, not links.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.paths import REPO, doc_files

FENCE = re.compile(r"^```.*?^```[^\n]*$", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[(?:[^\]]|\n)*?\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *#* *$", re.M)
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # https:, mailto:, ...


def prose(text: str) -> str:
    """The text without its fenced blocks (kept as blank lines, so line numbers stay)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of the Markdown file ``path``."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(prose(path.read_text(encoding="utf-8"))):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """``(line, target)`` of every link and image in the prose of ``path``."""
    text = CODE_SPAN.sub(lambda m: "x" * len(m.group(0)), prose(path.read_text(encoding="utf-8")))
    # A code span as the text of a link ([`x`](y)) was blanked above, the link itself is kept.
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in LINK.finditer(text)]


def broken_links(paths: list[Path]) -> list[str]:
    """``"file:line: target (why)"`` for every relative link that does not resolve."""
    problems = []
    for path in paths:
        for line, target in links(path):
            if EXTERNAL.match(target):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{line}"
            if not dest.exists():
                problems.append(f"{where}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                problems.append(f"{where}: {target} (no heading with that anchor)")
    return problems


def checked_files() -> list[Path]:
    return [*doc_files(), REPO / "ARCHITECTURE.md"]


def test_the_docs_have_pages_and_the_readme_links_each_one() -> None:
    pages = sorted(p.name for p in checked_files() if p.parent.name == "docs")
    assert len(pages) >= 10
    linked = {Path(target.partition("#")[0]).name for _, target in links(REPO / "README.md")}
    assert set(pages) <= linked, set(pages) - linked


def test_every_relative_link_resolves() -> None:
    assert broken_links(checked_files()) == []


def test_the_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## Run `chatlayers eval` (fast)\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[fine](other.md#run-chatlayers-eval-fast) [fine too](#page) [web](https://x.invalid/y)\n"
        "[gone](missing.md) [bad anchor](other.md#nope)\n"
        "```text\n[in a block](missing-too.md)\n```\n"
        "`[in a code span](missing-three.md)` ![image](img/none.png)\n"
        "[split\nover lines](#nowhere)\n"
    )
    assert broken_links([page]) == [
        f"{page}:4: missing.md (no such file)",
        f"{page}:4: other.md#nope (no heading with that anchor)",
        f"{page}:8: img/none.png (no such file)",
        f"{page}:9: #nowhere (no heading with that anchor)",
    ]

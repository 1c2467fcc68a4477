"""How many files one configuration visits on its way from ``open_storage`` to a built stack.

A bound on the walk (:mod:`tests.config.walk`) keeps the configuration machinery readable
in the order it runs: it may only shrink.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.config import open_storage
from storage.layers.summarizing import SummarizingChatStorage
from tests.config.walk import Walk, trace_walk

URL = "summarize?trigger_at=5::scrub::sqlite:///x.db"
TOML = """\
[store]
url = "sqlite:///x.db"

[[layers]]
type = "summarize"
trigger_at = 5

[[layers]]
type = "scrub"
"""
# Parse, resolve, construct: 12 stays in 7 files (5 returns) for either form. Before the
# three passes the same walk was 32 stays in 8 files (24 returns) for the URL and 34 (26
# returns) for the file; the goal was at most half.
MAX_STAYS = 12
MAX_RETURNS = 5


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", "a-secret-for-the-walk-0123456789")
    (tmp_path / "stack.toml").write_text(TOML)
    return tmp_path


def test_stays_files_and_returns_are_counted() -> None:
    walk = Walk.of([("a.py", "f"), ("a.py", "g"), ("b.py", "h"), ("a.py", "i"), ("c.py", "j")])
    assert [stay.file for stay in walk.stays] == ["a.py", "b.py", "a.py", "c.py"]
    assert walk.stays[0].functions == ("f", "g")
    assert walk.figures() == (4, 3, 1)


@pytest.mark.parametrize("config", [URL, "stack.toml"], ids=["url", "toml"])
def test_the_walk_of_one_configuration_is_bounded(here: Path, config: str) -> None:
    open_storage(config)  # imports and the registry's cache: the walk is the steady one
    walk = trace_walk(open_storage, config)
    assert trace_walk(open_storage, config) == walk  # deterministic
    stack = open_storage(config)
    assert isinstance(stack.inner, SummarizingChatStorage)
    # The trace sees the whole way: from the entry to the stack.
    assert walk.stays[0].functions[0] == "open_storage", walk.render()
    assert walk.stays[-1].file == "stack.py", walk.render()
    # Three passes, each visited once, in order: parse, resolve (and what it uses), construct.
    files = [stay.file for stay in walk.stays]
    assert files[:3] == ["loading.py", "parse.py", "resolve.py"], walk.render()
    assert files[-2:] == ["construct.py", "stack.py"], walk.render()
    assert files.count("parse.py") == files.count("construct.py") == 1, walk.render()
    assert len(walk.stays) <= MAX_STAYS, walk.render()
    assert walk.returns <= MAX_RETURNS, walk.render()

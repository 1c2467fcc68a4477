"""A third-party store, registered through an entry point, runs the conformance kit
(``storage.testing``) in its own pytest session, exactly as its author would."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.paths import REPO

ROOT = REPO

STORE_MODULE = '''
from storage.stores.memory import InMemoryChatStorage


class ToyChatStorage(InMemoryChatStorage):
    """A third-party store: ``toy://`` (it happens to keep everything in memory)."""

    scheme = "toy"
'''

KIT_TESTS = """
import pytest

from storage.config import open_storage
from storage.config.registry import registry
from storage.testing import ConformanceSuite, StoreHarness


def test_toy_comes_from_the_entry_point():
    assert registry.entry("stores", "toy").origin == "entry point of toy_store"


class TestToyStore(ConformanceSuite):
    backends = ("asyncio",)

    @pytest.fixture
    def harness(self):
        # Built by name through the registry, options converted by config like a user's.
        return StoreHarness(
            open=lambda **options: open_storage({"store": {"url": "toy://", **options}}),
            persistent=False,
        )
"""


def _throwaway_distribution(site: Path) -> None:
    package = site / "toy_store_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(STORE_MODULE))
    info = site / "toy_store-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy_store\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[chatlayers.stores]\ntoy = toy_store_pkg:ToyChatStorage\n"
    )


def test_entry_point_store_runs_the_kit(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _throwaway_distribution(site)
    project = tmp_path / "toy-project"
    project.mkdir()
    (project / "test_toy_conformance.py").write_text(textwrap.dedent(KIT_TESTS))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(project)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    summary = result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 0, summary
    passed = re.search(r"(\d+) passed", result.stdout)
    assert passed is not None, summary
    # The whole kit ran: protocol, ability, layer and input tests over three layerings.
    assert int(passed.group(1)) > 150, summary
    assert "failed" not in result.stdout

"""Typed for users. The wheel ships ``py.typed``, and a user's ``mypy --strict`` sees the public
API's real types (checked on a small user script against the built wheel, installed into a
temporary directory, so the check is what a user of the wheel gets)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Shared between runs: a warm cache makes the check take a few seconds instead of ~30.
CACHE = Path(tempfile.gettempdir()) / "chatlayers-mypy-cache"

GOOD = """
from collections.abc import Mapping
from typing import Any, assert_type

from storage import ChatKey, ChatMessage, InMemoryChatStorage, ToolCall
from storage.history import validate_history
from storage.pii import PIIScrubber


async def main() -> None:
    key = ChatKey("u", "s", "a")
    store = InMemoryChatStorage()
    message = ChatMessage("user", [{"type": "text", "text": "hi"}])
    assert_type(message.content, str | tuple[Mapping[str, Any], ...] | None)
    saved = await store.save(key, message)
    assert_type(saved, list[ChatMessage])
    fetched = await store.fetch(key, limit=10)
    assert_type(fetched[0].role, str)
    assert_type(fetched[0].tool_calls, tuple[ToolCall, ...])
    wire = fetched[0].to_openai()
    assert_type(wire, dict[str, Any])
    history = validate_history([wire], system="strip")
    assert_type(history, list[ChatMessage])
    scrubbed = PIIScrubber(secret="s")(message, key)
    assert_type(scrubbed, ChatMessage)
    content = scrubbed.content
    if isinstance(content, tuple):
        assert_type(content[0], Mapping[str, Any])
    await store.aclose()


async def abilities() -> None:
    from storage import open_storage
    from storage.abilities import Head, SessionListing, SessionPage, Tail, find_ability
    from storage.layers.transforming import TransformingChatStorage

    key = ChatKey("u", "s", "a")
    stack = open_storage("memory://")
    assert_type(await stack.head(key), Head)  # a forwarder, typed as the protocol's method
    layer = TransformingChatStorage(InMemoryChatStorage(), lambda m, k: m)
    assert_type(await layer.fetch_since(key, 0), Tail)
    sessions = find_ability(stack, SessionListing)
    if sessions is not None:
        page = await sessions.list_sessions("u", limit=5, cursor=None)
        assert_type(page, SessionPage)
"""

BAD = """
from storage import ChatKey, ChatMessage
from storage.history import validate_history

ChatMessage("user", 5)
ChatKey("u", "s")
validate_history([], system="drop")


async def abilities() -> None:
    from storage import open_storage
    from storage.abilities import SessionListing, find_ability

    stack = open_storage("memory://")
    await stack.head("u")
    sessions = find_ability(stack, SessionListing)
    if sessions is not None:
        await sessions.list_sessions("u", limt=5)
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package built as a wheel and unpacked as an install (a ``site-packages`` dir)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for package in ("storage", "summarizers"):
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    command = [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q", "-w", str(dist)]
    # The environment's own setuptools first (fast, offline); an isolated build otherwise.
    fast = subprocess.run([*command, "--no-build-isolation"], capture_output=True)
    if fast.returncode != 0:
        subprocess.run(command, check=True, capture_output=True)
    (wheel,) = dist.glob("chatlayers-*.whl")
    site = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert "storage/py.typed" in names
        assert "summarizers/py.typed" in names
        archive.extractall(site)
    return site


def mypy(site: Path, script: str, workdir: Path) -> subprocess.CompletedProcess[str]:
    path = workdir / "user_script.py"
    path.write_text(textwrap.dedent(script), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("MYPYPATH", None)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--python-version",
         "3.11", "--cache-dir", str(CACHE), "--config-file", os.devnull, str(path)],
        cwd=workdir,  # not the repository: only the installed wheel is importable
        env=env,
        capture_output=True,
        text=True,
    )  # fmt: skip


def test_user_script_type_checks_strict_against_the_wheel(installed: Path, tmp_path: Path) -> None:
    result = mypy(installed, GOOD, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_wrong_use_of_the_api_is_reported(installed: Path, tmp_path: Path) -> None:
    result = mypy(installed, BAD, tmp_path)
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert 'Argument 2 to "ChatMessage" has incompatible type "int"' in out
    assert 'Missing positional argument "agent_id" in call to "ChatKey"' in out
    assert 'Argument "system" to "validate_history" has incompatible type' in out
    assert 'Argument 1 has incompatible type "str"; expected "ChatKey"' in out  # stack.head
    assert 'Unexpected keyword argument "limt"' in out
    assert "py.typed" not in out  # the package is seen as typed, not as an untyped install

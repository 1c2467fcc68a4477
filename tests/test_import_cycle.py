"""``storage`` imports nothing from ``summarizers`` (``summarizers`` builds on ``storage``, never
the other way): no import statement anywhere under storage/ names it, at module level, inside
a function or under ``TYPE_CHECKING``, and importing the summarizing layer loads none of it.
The layer's default summarizer is found by name in the registry, the plugin seam."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

import storage.config.registry
import storage.summarizer
import storage.tokens
import summarizers
import summarizers.tokens
import summarizers.types
from storage.config.registry import Registry
from storage.layers.summarizing import SummarizingChatStorage
from storage.stores.memory import InMemoryChatStorage
from summarizers import ExtractiveSummarizer
from tests.paths import REPO


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):  # every node: function bodies and TYPE_CHECKING blocks too
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def test_no_module_of_storage_imports_summarizers() -> None:
    files = sorted((REPO / "storage").rglob("*.py"))
    assert len(files) > 50
    offending = [
        f"{path.relative_to(REPO)}:{line}: {module}"
        for path in files
        for line, module in _imported_modules(ast.parse(path.read_text(), str(path)))
        if module == "summarizers" or module.startswith("summarizers.")
    ]
    assert offending == []


def test_the_walk_finds_imports_inside_functions() -> None:
    tree = ast.parse("def f():\n    from summarizers.tokens import x\n    import summarizers\n")
    assert [m for _, m in _imported_modules(tree)] == ["summarizers.tokens", "summarizers"]


def test_importing_the_summarizing_layer_loads_no_summarizer() -> None:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import storage.layers.summarizing"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    loaded = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if "|" in line]
    assert "storage.layers.summarizing.layer" in loaded
    assert "storage.tokens" in loaded
    assert [m for m in loaded if m == "summarizers" or m.startswith("summarizers.")] == []


def test_the_default_summarizer_is_the_registered_extractive_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    layer = SummarizingChatStorage(InMemoryChatStorage())
    assert type(layer.summarizer) is ExtractiveSummarizer
    assert "summarizer=ExtractiveSummarizer(" in layer.describe()

    class Own(ExtractiveSummarizer):
        pass

    registry = Registry(entry_points=False)
    registry.register("summarizers", "extractive", Own, clobber=True)
    monkeypatch.setattr(storage.config.registry, "registry", registry)
    assert type(SummarizingChatStorage(InMemoryChatStorage()).summarizer) is Own

    class Later(ExtractiveSummarizer):
        pass

    registry.register("summarizers", "extractive", Later, clobber=True)  # seen at once
    assert type(SummarizingChatStorage(InMemoryChatStorage()).summarizer) is Later


def test_the_public_names_of_summarizers_are_the_storage_side_objects() -> None:
    assert summarizers.ChatSummarizer is storage.summarizer.ChatSummarizer
    assert summarizers.types.ChatSummarizer is storage.summarizer.ChatSummarizer
    assert summarizers.count_tokens is storage.tokens.count_tokens
    for name in summarizers.tokens.__all__:
        assert getattr(summarizers.tokens, name) is getattr(storage.tokens, name)
    assert set(summarizers.tokens.__all__) == {
        "DEFAULT_ENCODING",
        "TokenCounter",
        "context_window",
        "count_tokens",
        "encoding_for_model",
        "get_encoding",
        "message_tokens",
    }

"""The adapters import their frameworks lazily, and a missing framework names its extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.paths import REPO

FRAMEWORKS = ("agent_squad", "agents", "langchain_core", "langgraph", "llama_index", "pydantic_ai")


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )


def test_importing_storage_and_the_adapters_package_imports_no_framework() -> None:
    done = run(
        f"""
        import sys
        import storage, storage.adapters, storage.sync
        assert set(storage.adapters.__all__) <= set(dir(storage.adapters))
        loaded = [m for m in {FRAMEWORKS!r} + ("litellm",) if m in sys.modules]
        assert not loaded, loaded
        from storage.adapters import OpenAIAgentsSession
        assert "agents" in sys.modules and "agent_squad" not in sys.modules
        assert "langchain_core" not in sys.modules
        print("ok")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_missing_framework_raises_an_error_naming_the_extra() -> None:
    done = run(
        f"""
        import sys
        from importlib.abc import MetaPathFinder

        class Hide(MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {FRAMEWORKS!r}:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
                return None

        sys.meta_path.insert(0, Hide())
        from storage.errors import ConfigError
        import storage.adapters as adapters
        for name, extra in [
            ("AgentSquadChatStorage", "agent-squad"),
            ("OpenAIAgentsSession", "openai-agents"),
            ("LangChainChatMessageHistory", "langchain"),
            ("ChatlayersCheckpointer", "langgraph"),
            ("LlamaIndexChatStore", "llama-index"),
            ("LlamaIndexMemoryStore", "llama-index"),
            ("PydanticAIHistory", "pydantic-ai"),
        ]:
            try:
                getattr(adapters, name)
            except ImportError as exc:
                assert isinstance(exc, ConfigError), type(exc)
                assert isinstance(exc, adapters.MissingExtraError)
                assert f"pip install 'chatlayers[{{extra}}]'" in str(exc), str(exc)
            else:
                raise AssertionError(f"{{name}} imported without its framework")
        print("ok")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"

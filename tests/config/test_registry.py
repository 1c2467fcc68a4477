"""The registry: lazy imports, duplicates refused, did-you-mean, install hints, entry points."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from storage.config import open_storage
from storage.config.registry import KINDS, Registry, registry
from storage.errors import ConfigError
from storage.layers.transforming import TransformingChatStorage
from storage.message import ChatKey, ChatMessage

pytestmark = pytest.mark.anyio
KEY = ChatKey("u", "s", "a")


def test_builtin_names() -> None:
    reg = Registry(entry_points=False)
    assert {"memory", "sqlite", "jsonl", "redis", "rediss", "postgresql", "postgres"} <= set(
        reg.names("stores")
    )
    assert {"scrub", "summarize", "transform"} <= set(reg.names("layers"))
    assert {"extractive", "litellm"} <= set(reg.names("summarizers"))


def test_importing_config_imports_no_driver() -> None:
    code = (
        "import sys, storage, storage.config, storage.config.registry, storage.cli\n"
        "storage.config.open_storage('memory://')\n"
        "bad = [m for m in ('redis', 'asyncpg', 'litellm', 'rich') if m in sys.modules]\n"
        "print(bad)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_resolve_imports_lazily_and_caches() -> None:
    reg = Registry(entry_points=False)
    first = reg.resolve("stores", "memory")
    assert first is reg.resolve("stores", "memory")
    assert first.__name__ == "InMemoryChatStorage"


def test_duplicate_registration_refused() -> None:
    reg = Registry(entry_points=False)
    with pytest.raises(ConfigError, match=r"already registered .*clobber=True"):
        reg.register("stores", "sqlite", "storage.stores.memory:InMemoryChatStorage")
    reg.register("layers", "mine", TransformingChatStorage)
    with pytest.raises(ConfigError, match="'mine' is already registered"):
        reg.register("layers", "mine", TransformingChatStorage)
    reg.register("stores", "sqlite", "storage.stores.memory:InMemoryChatStorage", clobber=True)
    assert reg.resolve("stores", "sqlite").__name__ == "InMemoryChatStorage"


def test_register_validates_kind_and_name() -> None:
    reg = Registry(entry_points=False)
    with pytest.raises(ConfigError, match="unknown registry kind"):
        reg.register("widgets", "x", "a:b")  # type: ignore[arg-type]
    for bad in ("", "a:b", "with space", "a/b", "q?x"):
        with pytest.raises(ConfigError, match="invalid"):
            reg.register("layers", bad, "a:b")


def test_unregister() -> None:
    reg = Registry(entry_points=False)
    reg.unregister("layers", "transform")
    assert "transform" not in reg.names("layers")
    reg.unregister("layers", "transform")  # a no-op the second time


@pytest.mark.parametrize(
    ("kind", "name", "suggestion"),
    [
        ("stores", "sqlit", "sqlite"),
        ("stores", "postgre", "postgres"),
        ("layers", "sumarize", "summarize"),
        ("layers", "scrubb", "scrub"),
        ("summarizers", "litelm", "litellm"),
    ],
)
def test_unknown_name_suggests(kind: str, name: str, suggestion: str) -> None:
    reg = Registry(entry_points=False)
    with pytest.raises(ConfigError, match=f"did you mean '{suggestion}'") as info:
        reg.resolve(kind, name)  # type: ignore[arg-type]
    assert "known:" in str(info.value)


def test_unknown_name_without_close_match_lists_known() -> None:
    reg = Registry(entry_points=False)
    with pytest.raises(ConfigError) as info:
        reg.resolve("layers", "zzzzzz")
    assert "did you mean" not in str(info.value)
    assert "scrub, strict, summarize, transform" in str(info.value)


def test_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # Hide redis-py as if it were not installed (a None entry makes imports fail).
    monkeypatch.setitem(sys.modules, "redis", None)
    reg = Registry(entry_points=False)
    with pytest.raises(ConfigError, match=r"pip install 'chatlayers\[redis\]'"):
        reg.resolve("stores", "redis")
    with pytest.raises(ConfigError, match=r"pip install 'chatlayers\[redis\]'"):
        open_storage("scrub::redis://:s3cret@localhost:6379/0", registry=reg)


def test_missing_llm_driver_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "litellm", None)
    with pytest.raises(ConfigError, match=r"pip install 'chatlayers\[llm\]'"):
        open_storage(
            "summarize?summarizer=litellm&summarizer.model=gpt-4o-mini::memory://",
            registry=Registry(entry_points=False),
        )


def test_missing_driver_of_a_registered_entry() -> None:
    reg = Registry(entry_points=False)
    reg.register(
        "stores",
        "fancy",
        "chatlayers_no_such_module:Store",
        extra="fancy",
        requires=["chatlayers_no_such_driver"],
    )
    with pytest.raises(ConfigError, match=r"pip install 'chatlayers\[fancy\]'"):
        reg.resolve("stores", "fancy")


def test_module_attr_names_resolve_directly() -> None:
    reg = Registry(entry_points=False)
    factory = reg.resolve("layers", "storage.layers.transforming:TransformingChatStorage")
    assert factory is TransformingChatStorage
    with pytest.raises(ConfigError, match="has no attribute"):
        reg.resolve("layers", "storage.layers.transforming:Nope")
    with pytest.raises(ConfigError, match="cannot import"):
        reg.resolve("layers", "chatlayers_missing_pkg:Layer")


def test_process_registry_is_a_registry() -> None:
    assert isinstance(registry, Registry)
    assert set(KINDS) == {"stores", "layers", "summarizers"}


# --- entry points of a throw-away distribution ---------------------------------------------

LAYER_MODULE = '''
from storage.protocol import ChatStorageWrapper


class ShoutingChatStorage(ChatStorageWrapper):
    """Upper-cases text content on save (a third-party layer)."""

    def __init__(self, inner, *, suffix: str = "!", times: int = 1) -> None:
        super().__init__(inner)
        self.suffix = suffix
        self.times = times

    async def save(self, key, message):
        import attrs
        text = message.content.upper() + self.suffix * self.times
        return await self.inner.save(key, attrs.evolve(message, content=text))

    def describe(self) -> str:
        return f"ShoutingChatStorage(suffix={self.suffix!r}, times={self.times})"
'''


def _throwaway_distribution(root: Path, entry_points: str, name: str = "shout_layers") -> None:
    package = root / f"{name}_pkg"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(LAYER_MODULE))
    info = root / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


async def test_entry_point_layer_built_from_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "site").mkdir()
    _throwaway_distribution(
        tmp_path / "site",
        "[chatlayers.layers]\nshout = shout_layers_pkg:ShoutingChatStorage\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    config = tmp_path / "stack.toml"
    config.write_text(
        textwrap.dedent(
            """
            [store]
            url = "memory://"

            [[layers]]
            type = "shout"
            suffix = "?"
            times = 3
            """
        )
    )
    reg = Registry()
    assert "shout" in reg.names("layers")
    assert reg.entry("layers", "shout").origin == "entry point of shout_layers"
    async with open_storage(config, registry=reg) as stack:
        assert stack.describe().splitlines()[0] == "ShoutingChatStorage(suffix='?', times=3)"
        await stack.save(KEY, ChatMessage("user", "hello"))
        assert [m.content for m in await stack.fetch(KEY)] == ["HELLO???"]
    # Options are converted by the layer's declared types, with its allowed options named.
    config.write_text('[store]\nurl = "memory://"\n[[layers]]\ntype = "shout"\ntimes = "x"\n')
    with pytest.raises(ConfigError, match="layer 'shout': option 'times' must be an integer"):
        open_storage(config, registry=reg)


def test_entry_point_cannot_replace_a_builtin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "site").mkdir()
    _throwaway_distribution(
        tmp_path / "site",
        "[chatlayers.layers]\nscrub = shout_layers_pkg:ShoutingChatStorage\n",
        name="evil_layers",
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    reg = Registry()
    with caplog.at_level(logging.WARNING, logger="storage.config.registry"):
        names = reg.names("layers")
    assert "scrub" in names
    assert reg.entry("layers", "scrub").origin == "builtin"
    assert "ignoring layer 'scrub' from entry point of evil_layers" in caplog.text


def test_registry_without_entry_points_ignores_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "site").mkdir()
    _throwaway_distribution(
        tmp_path / "site", "[chatlayers.layers]\nshout = shout_layers_pkg:ShoutingChatStorage\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert "shout" not in Registry(entry_points=False).names("layers")
    reg = Registry()
    assert "shout" in reg.names("layers")

"""The three passes of a configuration: parse reads nothing, resolve reads the world and
collects every problem (constructor value checks included), construct only builds."""

from __future__ import annotations

import builtins
import importlib.metadata
import os
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Annotated, Any, NoReturn

import pytest

from storage.checked import Check
from storage.cli import main
from storage.config import open_storage
from storage.config.loading import to_spec
from storage.config.parse import Parser
from storage.config.registry import Registry
from storage.config.spec import ComponentSpec, StackSpec
from storage.errors import ConfigError, InvalidArgumentError
from storage.layers.summarizing import SummarizingChatStorage
from storage.layers.transforming import TransformingChatStorage
from storage.stores.memory import InMemoryChatStorage
from summarizers.extractive import ExtractiveSummarizer


def problem_lines(error: BaseException) -> list[str]:
    return [line[4:] for line in str(error).splitlines()[1:] if line.startswith("  - ")]


# --- parse is pure --------------------------------------------------------------------------


def untouchable(*args: Any, **kwargs: Any) -> NoReturn:
    raise AssertionError("parsing reached outside its input")


class NoEnvironment(MutableMapping[str, str]):
    """An ``os.environ`` that fails on any read."""

    def __getitem__(self, key: str) -> str:
        untouchable()

    def __setitem__(self, key: str, value: str) -> None:
        untouchable()

    def __delitem__(self, key: str) -> None:
        untouchable()

    def __iter__(self) -> Iterator[str]:
        untouchable()

    def __len__(self) -> int:
        untouchable()


TOML = """\
[store]
url_env = "CHATLAYERS_TEST_DB"
retention = "30d"

[[layers]]
type = "summarize"
trigger_at_env = "CHATLAYERS_TEST_TRIGGER"
[layers.summarizer]
type = "litellm"
model = "gpt-4o-mini"

[[layers]]
type = "scrub"
secret_env = "CHATLAYERS_TEST_SECRET"
known_values_file = "names.toml"
"""


def test_parsing_reads_no_environment_no_file_and_no_registry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with monkeypatch.context() as guard:
        guard.setattr(os, "environ", NoEnvironment())
        for name in ("resolve", "entry", "names", "_discover"):
            guard.setattr(Registry, name, untouchable)
        guard.setattr(importlib.metadata, "entry_points", untouchable)
        guard.setattr(builtins, "open", untouchable)
        guard.setattr(Path, "read_bytes", untouchable)
        chain = Parser().chain(
            "summarize?trigger_at_env=T&summarizer=nosuch::scrub?secret_env=S::nosuch://h?x=1"
        )
        text = Parser(Path("/etc/chatlayers")).document(TOML, "TOML text")
        table = Parser().mapping({"store": {"type": "nosuch", "x_env": "X"}}, "dict")
    # Names stay names, environment variables unread, files unopened: all for resolving.
    assert chain.problems == []
    assert [layer.name for layer in chain.layers] == ["summarize", "scrub"]
    assert chain.layers[0].options["trigger_at_env"] == "T"
    assert chain.layers[0].options["summarizer"].name == "nosuch"
    assert chain.store.name == "nosuch"
    assert text.problems == []
    assert (text.store.url_env, text.store.url, text.store.name) == ("CHATLAYERS_TEST_DB", None, "")
    assert text.layers[0].options["trigger_at_env"] == "CHATLAYERS_TEST_TRIGGER"
    assert text.layers[1].options["known_values_file"] == "names.toml"
    assert text.layers[1].base_dir == Path("/etc/chatlayers")
    assert table.store.options == {"x_env": "X"}


def test_the_environment_is_read_when_resolving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CHATLAYERS_TEST_DB", "CHATLAYERS_TEST_TRIGGER", "CHATLAYERS_TEST_SECRET"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "names.toml").write_text('PERSON = ["Zed"]\n')
    path = tmp_path / "stack.toml"
    path.write_text(TOML)
    assert Parser().file(path).problems == []  # parsing read no variable: none is missing yet
    with pytest.raises(ConfigError) as info:
        open_storage(path)
    assert problem_lines(info.value) == [
        "[store]: store: url_env names 'CHATLAYERS_TEST_DB', which is not set",
        "[[layers]] #1 (summarize): layer 'summarize': trigger_at_env names "
        "'CHATLAYERS_TEST_TRIGGER', which is not set",
        "[[layers]] #2 (scrub): layer 'scrub': secret_env names 'CHATLAYERS_TEST_SECRET', "
        "which is not set",
    ]
    monkeypatch.setenv("CHATLAYERS_TEST_DB", f"sqlite:///{tmp_path}/chats.db")
    monkeypatch.setenv("CHATLAYERS_TEST_TRIGGER", "7")
    monkeypatch.setenv("CHATLAYERS_TEST_SECRET", "a-secret-from-the-environment")
    stack = open_storage(path)
    layer = stack.find(SummarizingChatStorage)
    assert layer is not None
    assert layer.trigger_at == 7
    assert stack.base.path == f"{tmp_path}/chats.db"  # type: ignore[attr-defined]
    assert "secret=env:CHATLAYERS_TEST_SECRET" in stack.describe()
    assert "a-secret-from" not in stack.describe() + repr(stack)


def test_an_environment_url_is_checked_like_a_written_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATLAYERS_TEST_DB", "memory://?retention=1d")
    config = {"store": {"url_env": "CHATLAYERS_TEST_DB", "retention": "2d", "type": "sqlite"}}
    with pytest.raises(ConfigError) as info:
        open_storage(config)
    assert problem_lines(info.value) == [
        "[store]: option 'retention' is given in the URL and the table",
        "[store]: type 'sqlite' does not match the URL scheme 'memory'",
    ]


def test_a_read_only_command_does_not_create_a_database_named_by_url_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.db"
    monkeypatch.setenv("CHATLAYERS_TEST_DB", f"sqlite:///{missing}")
    path = tmp_path / "stack.toml"
    path.write_text('[store]\nurl_env = "CHATLAYERS_TEST_DB"\n')
    assert to_spec(path).store.name == "sqlite"  # the command line decides on it
    assert main(["show", "--session", "s", "--config", str(path)]) == 1
    assert f"no SQLite database at '{missing}'" in capsys.readouterr().err
    assert not missing.exists()


# --- constructor value checks, listed with every other problem ------------------------------

BUILT: list[dict[str, Any]] = []


def at_least_one(value: int) -> None:
    if value < 1:
        raise ValueError(f"trigger_at must be >= 1, got {value}")


def not_negative(value: int) -> None:
    if value < 0:
        raise ValueError(f"keep_last must be >= 0, got {value}")


def even(value: int) -> None:
    if value % 2:
        raise InvalidArgumentError(f"must be even, got {value}")


class Recap(TransformingChatStorage):
    """A third-party layer whose options declare their checks (and the constructor runs
    the same functions, for code that calls it directly)."""

    def __init__(
        self,
        inner: Any,
        *,
        trigger_at: Annotated[int, Check(at_least_one)] = 20,
        keep_last: Annotated[int, Check(not_negative)] = 2,
        pairs: Annotated[int, Check(even)] | None = None,
    ) -> None:
        at_least_one(trigger_at)
        not_negative(keep_last)
        BUILT.append({"trigger_at": trigger_at, "keep_last": keep_last, "pairs": pairs})
        super().__init__(inner, lambda message, key: message)


class UncheckedRecap(TransformingChatStorage):
    """The same layer checking its options only in its constructor."""

    def __init__(self, inner: Any, *, trigger_at: int = 20, keep_last: int = 2) -> None:
        at_least_one(trigger_at)
        not_negative(keep_last)
        super().__init__(inner, lambda message, key: message)


@pytest.fixture
def recap_registry() -> Registry:
    BUILT.clear()
    registry = Registry(entry_points=False)
    registry.register("layers", "recap", Recap)
    registry.register("layers", "unchecked", UncheckedRecap)
    return registry


def test_constructor_value_checks_are_reported_with_every_other_problem(
    tmp_path: Path, recap_registry: Registry
) -> None:
    url = f"recap?trigger_at=-5&keep_last=-1::sqlite:///{tmp_path}/x.db?retention=30x"
    with pytest.raises(ConfigError) as info:
        open_storage(url, registry=recap_registry)
    assert problem_lines(info.value) == [
        "segment 1 (recap): layer 'recap': trigger_at must be >= 1, got -5",
        "segment 1 (recap): layer 'recap': keep_last must be >= 0, got -1",
        "segment 2 (sqlite): store 'sqlite': option 'retention': invalid duration '30x': use "
        "seconds or a number with a unit (ms, s, m, h, d, w), e.g. '30d', '12h', '1.5h'",
    ]
    assert BUILT == []
    assert list(tmp_path.iterdir()) == []  # nothing constructed
    stack = open_storage(
        f"recap?keep_last=0&pairs=4::sqlite:///{tmp_path}/x.db", registry=recap_registry
    )
    assert isinstance(stack.inner, Recap)
    assert BUILT == [{"trigger_at": 20, "keep_last": 0, "pairs": 4}]


def test_a_check_reads_like_the_constructors_own_error(recap_registry: Registry) -> None:
    with pytest.raises(ConfigError) as checked:
        open_storage("recap?trigger_at=0::memory://", registry=recap_registry)
    with pytest.raises(ConfigError) as unchecked:  # found by the constructor, alone
        open_storage("unchecked?trigger_at=0::memory://", registry=recap_registry)
    assert str(unchecked.value) == (
        "URL unchecked?trigger_at=0::memory://: layer 'unchecked': trigger_at must be >= 1, got 0"
    )
    assert str(checked.value) == (
        "URL recap?trigger_at=0::memory://: layer 'recap': trigger_at must be >= 1, got 0"
    )
    # A message that does not name its option is given the option's name.
    with pytest.raises(ConfigError) as info:
        open_storage("recap?pairs=3&trigger_at=x::memory://", registry=recap_registry)
    assert problem_lines(info.value) == [
        "segment 1 (recap): layer 'recap': option 'pairs': must be even, got 3",
        "segment 1 (recap): layer 'recap': option 'trigger_at' must be an integer, got 'x'",
    ]


def test_a_store_type_beside_its_url_is_any_name_of_that_store() -> None:
    registry = Registry(entry_points=False)
    registry.register("stores", "vault", InMemoryChatStorage)
    registry.register("stores", "safe", InMemoryChatStorage)
    registry.register("stores", "other", "tests.config.test_passes:OtherStore")
    stack = open_storage({"store": {"url": "vault://", "type": "safe"}}, registry=registry)
    assert isinstance(stack.base, InMemoryChatStorage)
    for wrong in ("other", "nosuch"):
        with pytest.raises(ConfigError) as info:
            open_storage({"store": {"url": "vault://", "type": wrong}}, registry=registry)
        assert str(info.value) == (
            f"dict: [store]: type {wrong!r} does not match the URL scheme 'vault'"
        )


class OtherStore(InMemoryChatStorage):
    """A store of another name."""


# --- nested components -----------------------------------------------------------------------


def test_a_nested_component_is_resolved_only_when_its_owner_takes_it() -> None:
    url = "transform?transform=tests.config.test_config:keep&summarizer=nosuch::memory://"
    with pytest.raises(ConfigError) as info:
        open_storage(url)
    text = str(info.value)  # one problem: the summarizer is not looked up
    assert text.startswith(f"URL {url}: layer 'transform' has no option 'summarizer'; allowed: ")
    assert "\n" not in text


def test_a_spec_made_in_code_may_give_a_nested_component_as_a_mapping() -> None:
    layer = ComponentSpec(
        "layers", "summarize", {"summarizer": {"type": "extractive", "max_chars": "500"}}
    )
    stack = open_storage(StackSpec(ComponentSpec("stores", "memory"), [layer]))
    summarizing = stack.find(SummarizingChatStorage)
    assert summarizing is not None
    assert summarizing.summarizer == ExtractiveSummarizer(max_chars=500)
    bad = ComponentSpec("layers", "summarize", {"summarizer": {"max_chars": 5}})
    with pytest.raises(ConfigError, match="layer 'summarize': summarizer needs 'type'"):
        open_storage(StackSpec(ComponentSpec("stores", "memory"), [bad]))

"""The summarizing layer's options: each value's rule declared on the constructor (config
lists every bad value with the other problems of a URL or file), validated once, one error
type naming the option, frozen after construction."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import attrs
import pytest

from storage import open_storage
from storage.checked import checks_of
from storage.errors import ConfigError
from storage.layers.summarizing import SummarizingChatStorage
from storage.layers.summarizing.options import CHECKED, SummarizingOptions
from storage.stores.memory import InMemoryChatStorage

# Every single-value rule: the option, a value it refuses, the boundary value it accepts.
RULES = [
    ("trigger_at", 0, 1),
    ("keep_last", -1, 0),
    ("max_buffers", 0, 1),
    ("timeout", 0, 0.001),
    ("lease_ttl", 0, 0.001),
    ("retry_backoff", -0.5, 0),
    ("retry_max", -1, 0),
    ("trigger_tokens", 0, 1),
    ("keep_tokens", 0, 1),
    ("trigger_fraction", 1.5, 1),
    ("trigger_fraction", 0, 0.001),
    ("trim_tool_results", 19, 20),
    ("trim_keep_turns", -1, 0),
    ("process_recheck", 0, 0.001),
    ("context_window", 0, 1),
    ("on_error", "ignore", "fallback"),
    ("coherence", "none", "process"),
    ("summaries", "disk", "memory"),
    ("summary_role", "tool", "developer"),
]


def _declared(name: str) -> Any:
    """The annotation of the layer's constructor parameter ``name``, ``None`` removed."""
    hints = typing.get_type_hints(SummarizingChatStorage.__init__, include_extras=True)
    hint = hints[name]
    if typing.get_origin(hint) in (typing.Union, __import__("types").UnionType):
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    return hint


def test_every_checked_option_declares_its_check_on_the_constructor() -> None:
    assert {name for name, _, _ in RULES} == set(CHECKED)
    for name, annotation in CHECKED.items():
        declared = checks_of(_declared(name))
        assert declared, f"{name}: no Check in the constructor's annotation"
        assert declared == checks_of(annotation), name


@pytest.mark.parametrize(("name", "bad", "good"), RULES)
def test_each_check_refuses_its_bad_value_by_name_and_accepts_the_boundary(
    name: str, bad: object, good: object, tmp_path: Path
) -> None:
    (check,) = checks_of(CHECKED[name])
    with pytest.raises(ConfigError, match=name):
        check(bad)
    check(good)
    # Found while resolving, before anything is built: listed with the store's problem.
    with pytest.raises(ConfigError) as caught:
        open_storage(f"summarize?{name}={bad}::sqlite:///{tmp_path / 'x.db'}?retention=30x")
    lines = str(caught.value).splitlines()
    assert lines[0].endswith("2 problems:")
    assert lines[1].startswith("  - segment 1 (summarize): layer 'summarize': ")
    assert name in lines[1]
    assert "retention" in lines[2]


def test_a_url_reports_every_bad_summarizing_option_with_the_stores(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    with pytest.raises(ConfigError) as caught:
        open_storage(f"summarize?trigger_at=-5&keep_last=-1::sqlite:///{db}?retention=30x")
    lines = str(caught.value).splitlines()
    assert lines[0].endswith("3 problems:")
    assert lines[1:] == [
        "  - segment 1 (summarize): layer 'summarize': trigger_at must be >= 1, got -5",
        "  - segment 1 (summarize): layer 'summarize': keep_last must be >= 0, got -1",
        "  - segment 2 (sqlite): store 'sqlite': option 'retention': invalid duration '30x': "
        "use seconds or a number with a unit (ms, s, m, h, d, w), e.g. '30d', '12h', '1.5h'",
    ]
    assert not db.exists()  # nothing was built


def test_a_toml_file_reports_every_bad_summarizing_option(tmp_path: Path) -> None:
    config = tmp_path / "chatlayers.toml"
    config.write_text(
        '[store]\nurl = "memory://"\n\n[[layers]]\ntype = "summarize"\n'
        "timeout = 0\nmax_buffers = 0\ntrim_tool_results = 5\ntrigger_fraction = 2.0\n"
    )
    with pytest.raises(ConfigError) as caught:
        open_storage(str(config))
    text = str(caught.value)
    assert "4 problems:" in text
    for wanted in (
        "timeout must be > 0 or None, got 0",
        "max_buffers must be >= 1, got 0",
        "trim_tool_results must be >= 20 characters, got 5",
        "trigger_fraction must be in (0, 1], got 2.0",
    ):
        assert wanted in text


def test_code_gets_every_bad_value_in_one_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        SummarizingChatStorage(InMemoryChatStorage(), trigger_at=0, keep_last=-1, lease_ttl=0)
    assert str(caught.value).splitlines() == [
        "3 bad summarizing options:",
        "  - trigger_at must be >= 1, got 0",
        "  - keep_last must be >= 0, got -1",
        "  - lease_ttl must be > 0, got 0",
    ]
    with pytest.raises(ConfigError, match=r"^keep_last must be an integer, got '2'$"):
        SummarizingChatStorage(InMemoryChatStorage(), keep_last="2")  # type: ignore[arg-type]


def test_rules_joining_options_stay_config_errors_after_the_value_checks() -> None:
    inner = InMemoryChatStorage()
    with pytest.raises(ConfigError, match="need 0 <= retry_backoff <= retry_max"):
        SummarizingChatStorage(inner, retry_backoff=10, retry_max=5)
    with pytest.raises(ConfigError, match="keep_tokens must be in"):
        SummarizingChatStorage(inner, trigger_tokens=100, keep_tokens=100)
    # A URL: the value checks pass, the joint rule is the constructor's, reported as config's.
    url = "summarize?trigger_at=3&trigger_tokens=100::memory://"
    with pytest.raises(ConfigError) as info:
        open_storage(url)
    assert str(info.value).startswith(f"URL {url}: layer 'summarize': give trigger_at")


def test_options_are_validated_once_and_frozen() -> None:
    layer = SummarizingChatStorage(InMemoryChatStorage(), timeout=10)
    assert layer.lease_ttl == 40.0  # resolved once: timeout + 30
    assert layer.trigger_at == 20
    with pytest.raises(AttributeError, match="read-only"):
        layer.trigger_at = 3  # type: ignore[assignment]
    options = layer._options
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        options.keep_last = 5  # type: ignore[misc]
    assert isinstance(options, SummarizingOptions)
    layer.summarizer_calls = 0  # counters stay writable (a caller may reset them)
    assert layer.summarizer_calls == 0

"""Configuration mistakes: every one reported at once; secret sources in ``describe()``;
the scrub layer's ``json_keys`` from URLs and TOML."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import pytest

from storage.checked import Check
from storage.cli import main
from storage.config import describe, load_config, open_storage
from storage.config.parse import parse_url
from storage.config.registry import Registry
from storage.errors import ConfigError, InvalidArgumentError
from storage.layers.checks import CHECKS
from storage.layers.scrubbing import scrub_layer
from storage.layers.transforming import TransformingChatStorage
from storage.message import ChatKey, ChatMessage, ToolCall
from storage.pii import PIIScrubber
from storage.stores.jsonl import JsonlChatStorage
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from tests.config.built_ins import built_ins

KEY = ChatKey("u", "s", "a")

SEVERAL = """\
[store]
type = "sqlite"
paht = "chats.db"

[[layers]]
type = "summarize"
trigger_at = "twenty"
[layers.summarizer]
type = "litellm"
modle = "gpt-4o-mini"

[[layers]]
type = "scrubb"

[[layers]]
type = "scrub"
secret = "inline-s3cret-value"
secret_env = "CHATLAYERS_TEST_PII"
mode = "masks"

[[layers]]
type = "scrub"
secret_env = "CHATLAYERS_TEST_UNSET"
"""


def write(tmp_path: Path, text: str, name: str = "stack.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def problem_lines(error: BaseException) -> list[str]:
    return [line[4:] for line in str(error).splitlines()[1:] if line.startswith("  - ")]


def test_a_toml_file_with_several_mistakes_reports_all_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CHATLAYERS_TEST_UNSET", raising=False)
    path = write(tmp_path, SEVERAL)
    with pytest.raises(ConfigError) as info:
        open_storage(path)
    first, *_ = str(info.value).splitlines()
    lines = problem_lines(info.value)
    assert first == f"config {path}: {len(lines)} problems:"
    assert lines == [
        "[store]: store 'sqlite' has no option 'paht' (did you mean 'path'?); allowed: "
        + lines[0].partition("allowed: ")[2],
        "[[layers]] #1 (summarize): layer 'summarize': option 'trigger_at' must be an "
        "integer, got 'twenty'",
        "[[layers]] #1 (summarize), [layers.summarizer] (litellm): summarizer 'litellm' has "
        "no option 'modle' (did you mean 'model'?); allowed: " + lines[2].partition("allowed: ")[2],
        "[[layers]] #1 (summarize), [layers.summarizer] (litellm): summarizer 'litellm' "
        "needs option 'model'",
        "[[layers]] #2 (scrubb): unknown layer 'scrubb' (did you mean 'scrub'?); known: "
        + lines[4].partition("known: ")[2],
        "[[layers]] #3 (scrub): layer 'scrub': give 'secret' or 'secret_env', not both",
        "[[layers]] #3 (scrub): layer 'scrub': option 'mode' must be one of 'redact', "
        "'mask'; got 'masks'",
        "[[layers]] #4 (scrub): layer 'scrub': secret_env names 'CHATLAYERS_TEST_UNSET', "
        "which is not set",
    ]
    assert "path" in lines[0].partition("allowed: ")[2].split(", ")
    assert "s3cret" not in str(info.value)
    assert not (tmp_path / "chats.db").exists()  # nothing constructed


def test_parse_and_plan_problems_are_reported_together(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        layerz = []
        [store]
        type = "memory"
        retenton = "1d"

        [[layers]]
        trigger_at = 3

        [[layers]]
        type = "summarize"
        keep_lats = 2
        [layers.summarizer]
        model = "gpt-4o-mini"
        """,
    )
    with pytest.raises(ConfigError) as info:
        open_storage(path)
    lines = problem_lines(info.value)
    assert len(lines) == 5, str(info.value)
    assert lines[0].startswith("unknown key 'layerz' (did you mean 'layers'?)")
    assert lines[1].startswith("[store]: store 'memory' has no option 'retenton' (did you mean")
    assert lines[2] == "[[layers]] #1: layers[0] needs 'type' (a layer name)"
    assert lines[3].startswith(
        "[[layers]] #2 (summarize), [layers.summarizer]: layers[1] (summarize).summarizer "
        "needs 'type'"
    )
    assert lines[4].startswith(
        "[[layers]] #2 (summarize): layer 'summarize' has no option 'keep_lats' "
        "(did you mean 'keep_last'"
    )
    # load_config alone reports every problem found while parsing (names are not resolved).
    with pytest.raises(ConfigError) as parsed:
        load_config(path)
    assert len(problem_lines(parsed.value)) == 3
    assert "keep_lats" not in str(parsed.value)


def test_a_url_chain_with_several_bad_segments_reports_all_of_them() -> None:
    url = (
        "sum marize::summarize?trigger_at=x&trigger_at=2::"
        "scrub?mode=q&secret=url-s3cret-1&secret=url-s3cret-2::memory://"
    )
    with pytest.raises(ConfigError) as info:
        open_storage(url)
    text = str(info.value)
    assert text.splitlines()[0].endswith(": 5 problems:")
    assert problem_lines(info.value) == [
        "segment 1 (sum marize): segment 1 ('sum marize') is not a layer name; layers come "
        "first, each as name[?option=value&...], the store URL last",
        "segment 2 (summarize): layer 'summarize': option 'trigger_at' is given twice",
        "segment 2 (summarize): layer 'summarize': option 'trigger_at' must be an integer, got 'x'",
        "segment 3 (scrub): layer 'scrub': option 'secret' is given twice",
        "segment 3 (scrub): layer 'scrub': option 'mode' must be one of 'redact', 'mask'; got 'q'",
    ]
    assert "s3cret" not in text
    with pytest.raises(ConfigError) as parsed:  # parse_url alone: the parsing problems
        parse_url(url)
    assert len(problem_lines(parsed.value)) == 3
    assert "s3cret" not in str(parsed.value)


def test_a_bad_store_url_is_reported_with_the_bad_layers() -> None:
    with pytest.raises(ConfigError) as info:
        open_storage("summarize?keep_lats=1::scrub?mode=q::sqlite")
    lines = problem_lines(info.value)
    assert len(lines) == 3
    assert lines[0].startswith("segment 1 (summarize): layer 'summarize' has no option")
    assert lines[1].startswith("segment 2 (scrub): layer 'scrub': option 'mode'")
    assert lines[2].startswith("segment 3 (store URL): the last segment 'sqlite' is not a store")


def test_bad_entities_and_a_store_url_option_are_listed_with_a_bad_layer_option() -> None:
    url = "summarize?trigger_at=x::scrub?entities=PERSON::sqlite:///never.db?paht=1"
    with pytest.raises(ConfigError) as info:
        open_storage(url)
    lines = problem_lines(info.value)
    assert len(lines) == 3
    assert lines[0].startswith("segment 1 (summarize): layer 'summarize': option 'trigger_at'")
    assert "unknown PII entity 'PERSON'" in lines[1]
    assert "NER recognizer" in lines[1]  # names have no rule-based detector
    assert lines[2] == (
        "segment 3 (sqlite): store 'sqlite' has no option 'paht'; allowed: busy_timeout, "
        "cache_chars, clock, create, purge_interval, retention, synchronous"
    )
    with pytest.raises(ConfigError, match="did you mean 'fsync'"):
        open_storage("jsonl://chats?fsynk=always")
    # Stores whose driver reads the rest of the query keep taking its parameters.
    dsn = "postgresql://u@db.internal/chats?sslmode=require"
    assert open_storage(dsn).describe().startswith(dsn)
    open_storage("redis://localhost/0?socket_timeout=3")


def test_one_mistake_keeps_its_single_line_wording(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        open_storage("summarize?triger_at=3::memory://")
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(
        "URL summarize?triger_at=3::memory://: layer 'summarize' has no option 'triger_at' "
        "(did you mean 'trigger_at'"
    )
    path = write(tmp_path, '[store]\ntype = "memory"\n[[layers]]\ntype = "scrub"\nmode = 1\n')
    with pytest.raises(ConfigError) as single:
        open_storage(path)
    assert str(single.value).startswith(f"config {path}: layer 'scrub': option 'mode' ")
    assert "problems" not in str(single.value)


def test_env_secret_missing_and_secret_redacted_in_the_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CHATLAYERS_TEST_PII", "env-s3cret-value")
    monkeypatch.delenv("CHATLAYERS_TEST_UNSET", raising=False)
    spec: dict[str, Any] = {
        "store": {"type": "memory", "retention_env": "CHATLAYERS_TEST_UNSET"},
        "layers": [
            # the env secret is read, then echoed by a bad value of another option
            {"type": "scrub", "secret_env": "CHATLAYERS_TEST_PII", "mode": "env-s3cret-value"},
            {"type": "summarize", "trigger_at": 1, "trigger_at_env": "CHATLAYERS_TEST_PII"},
        ],
    }
    with pytest.raises(ConfigError) as info:
        open_storage(spec)
    lines = problem_lines(info.value)
    assert len(lines) == 3
    assert "retention_env names 'CHATLAYERS_TEST_UNSET', which is not set" in lines[0]
    assert "option 'mode' must be one of" in lines[1]
    assert "give 'trigger_at' or 'trigger_at_env', not both" in lines[2]
    assert "s3cret" not in str(info.value)


def test_several_problems_in_the_store_table_of_a_url(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        [store]
        url = "memory://?retention=1d&retention=2d"
        type = "sqlite"
        [[layers]]
        type = "summarize"
        trigger_at = true
        """,
    )
    with pytest.raises(ConfigError) as info:
        open_storage(path)
    lines = problem_lines(info.value)
    assert lines[0] == "[store]: store 'memory': option 'retention' is given twice"
    assert lines[1] == "[store]: type 'sqlite' does not match the URL scheme 'memory'"
    assert lines[2].startswith("[[layers]] #1 (summarize): layer 'summarize': option")
    assert len(lines) == 3


def test_the_cli_prints_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, SEVERAL)
    assert main(["stack", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"chatlayers: error: config {path}: 8 problems:\n")
    assert err.count("\n  - ") == 8
    assert "s3cret" not in err


def test_a_dict_with_a_custom_registry() -> None:
    registry = Registry(entry_points=False)
    spec = {"store": {"type": "memroy"}, "layers": [{"type": "summarize", "trigger_at": "x"}]}
    with pytest.raises(ConfigError) as info:
        open_storage(spec, registry=registry)
    lines = problem_lines(info.value)
    assert lines[0].startswith("[store]: unknown store 'memroy' (did you mean 'memory'?)")
    assert lines[1].startswith("[[layers]] #1 (summarize): layer 'summarize': option")


# --- where a secret came from, in describe() ------------------------------------------------


def scrub_line(stack: Any) -> str:
    line = describe(stack).splitlines()[0]
    assert line.startswith("TransformingChatStorage(transform=PIIScrubber(")
    return line


def test_describe_names_the_secret_source_the_same_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", "default-s3cret")
    monkeypatch.setenv("MY_PII_SECRET", "mine-s3cret")
    from_toml = write(
        tmp_path,
        '[store]\ntype = "memory"\n[[layers]]\ntype = "scrub"\n'
        'secret_env = "CHATLAYERS_PII_SECRET"\n',
    )
    toml_env = scrub_line(open_storage(from_toml))
    default_env = scrub_line(open_storage("scrub::memory://"))
    assert "secret=env:CHATLAYERS_PII_SECRET" in toml_env
    assert toml_env == default_env  # same text whether config or the scrubber read it
    other = write(
        tmp_path,
        '[store]\ntype = "memory"\n[[layers]]\ntype = "scrub"\nsecret_env = "MY_PII_SECRET"\n',
        "other.toml",
    )
    assert "secret=env:MY_PII_SECRET" in scrub_line(open_storage(other))
    url = scrub_line(open_storage("scrub?secret=url-s3cret::memory://"))
    assert "secret=config," in url or url.endswith("secret=config))")
    inline = write(
        tmp_path,
        '[store]\ntype = "memory"\n[[layers]]\ntype = "scrub"\nsecret = "toml-s3cret"\n',
        "inline.toml",
    )
    assert "secret=config" in scrub_line(open_storage(inline))
    code = TransformingChatStorage(InMemoryChatStorage(), PIIScrubber("code-s3cret"))
    assert "secret=argument" in scrub_line(code)
    assert "secret=argument" in scrub_line(scrub_layer(InMemoryChatStorage(), secret="c-s3cret"))
    monkeypatch.delenv("CHATLAYERS_PII_SECRET")
    assert "secret=random per-process" in scrub_line(open_storage("scrub::memory://"))
    for stack in (open_storage(from_toml.with_name("other.toml")), open_storage(inline)):
        assert "s3cret" not in describe(stack) + repr(stack)


def test_cli_stack_shows_the_secret_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MY_PII_SECRET", "mine-s3cret")
    path = write(
        tmp_path,
        '[store]\ntype = "memory"\n[[layers]]\ntype = "scrub"\nsecret_env = "MY_PII_SECRET"\n',
    )
    assert main(["stack", "--config", str(path), "--json"]) == 0
    out = capsys.readouterr().out
    (scrub, _store) = json.loads(out)["components"]
    assert "secret=env:MY_PII_SECRET" in scrub
    assert "s3cret" not in out


def test_secret_source_cannot_be_given_by_hand() -> None:
    with pytest.raises(ConfigError, match="'secret_source' is set by the configuration"):
        open_storage("scrub?secret=x&secret_source=env:FAKE::memory://")
    with pytest.raises(ConfigError) as info:
        open_storage("scrub?mod=mask::memory://")
    allowed = str(info.value).partition("allowed: ")[2].split(", ")
    assert "secret" in allowed
    assert "json_keys" in allowed
    assert "secret_source" not in allowed


# --- json_keys through the scrub layer -------------------------------------------------------


async def scrubbed_arguments(stack: Any) -> dict[str, Any]:
    arguments = '{"nick": "Zed", "zip": "02139"}'
    await stack.save(KEY, ChatMessage("assistant", None, [ToolCall("c1", "book", arguments)]))
    (stored,) = await stack.base.fetch(KEY)
    out: dict[str, Any] = json.loads(stored.tool_calls[0].arguments)
    return out


@pytest.mark.anyio
async def test_scrub_json_keys_from_a_url() -> None:
    stack = open_storage('scrub?secret=k&json_keys={"PERSON":["nick"]}::memory://')
    out = await scrubbed_arguments(stack)
    assert out["nick"].startswith("<PERSON_")
    assert out["zip"] == "02139"  # json_keys replaces the defaults
    with pytest.raises(ConfigError, match="option 'json_keys' must be a JSON object"):
        open_storage("scrub?json_keys=nick::memory://")
    with pytest.raises(ConfigError, match=r"layer 'scrub': .*upper-case"):
        open_storage('scrub?json_keys={"person":["nick"]}::memory://')


@pytest.mark.anyio
async def test_scrub_json_keys_from_a_toml_table(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        [store]
        type = "memory"
        [[layers]]
        type = "scrub"
        secret = "k"
        [layers.json_keys]
        PERSON = ["nick"]
        ZIP_CODE = ["zip"]
        """,
    )
    out = await scrubbed_arguments(open_storage(path))
    assert out["nick"].startswith("<PERSON_")
    assert out["zip"].startswith("<ZIP_CODE_")


def test_a_json_config_with_a_repeated_key_and_other_mistakes(tmp_path: Path) -> None:
    path = tmp_path / "stack.json"
    path.write_text(
        '{"store": {"type": "memory"}, "layers": ['
        '{"type": "summarize", "trigger_at": 3, "trigger_at": 4, "keep_lats": 1}, '
        '{"type": "scrub", "mode": "masks"}]}'
    )
    with pytest.raises(ConfigError) as info:
        open_storage(path)
    lines = problem_lines(info.value)
    assert lines[0] == "key 'trigger_at' is given twice"
    assert lines[1].startswith("[[layers]] #1 (summarize): layer 'summarize' has no option")
    assert lines[2].startswith("[[layers]] #2 (scrub): layer 'scrub': option 'mode'")
    assert len(lines) == 3
    with pytest.raises(ConfigError, match="key 'trigger_at' is given twice"):
        load_config(path)


# --- option values a constructor checks: config problems, listed with the others ------------

# (store, URL, its duration options); nothing is reached: no server, no file is touched.
DURATION_OPTIONS = [
    ("memory", "memory://", ("retention", "purge_interval")),
    ("sqlite", "sqlite:///{tmp}/chats.db", ("retention", "purge_interval")),
    ("jsonl", "jsonl://{tmp}/chats", ("retention", "purge_interval")),
    ("postgresql", "postgresql://127.0.0.1:1/chats", ("retention", "purge_interval")),
    ("redis", "redis://127.0.0.1:1/0", ("ttl",)),
]
STORES = [pytest.param(url, names, id=store) for store, url, names in DURATION_OPTIONS]


def duration_problems(error: BaseException, names: tuple[str, ...]) -> list[str]:
    lines = problem_lines(error)
    assert len(lines) == len(names) + 1, str(error)
    assert any("unknown layer 'scrubb'" in line for line in lines)
    return [line for line in lines if "scrubb" not in line]


@pytest.mark.parametrize(("url", "names"), STORES)
def test_bad_durations_in_a_url_are_config_problems(
    tmp_path: Path, url: str, names: tuple[str, ...]
) -> None:
    url = url.format(tmp=tmp_path)
    bad = ["30x", "-5", "abc"]
    query = "&".join(f"{name}={value}" for name, value in zip(names, bad, strict=False))
    with pytest.raises(ConfigError) as info:
        open_storage(f"scrubb::{url}?{query}")
    lines = duration_problems(info.value, names)
    for line, name, value in zip(lines, names, bad, strict=False):
        assert f"option {name!r}: " in line, line
        assert value.lstrip("-") in line, line
    assert list(tmp_path.iterdir()) == []  # nothing constructed


@pytest.mark.parametrize(("url", "names"), STORES)
def test_bad_durations_in_a_dict_and_a_toml_file_are_config_problems(
    tmp_path: Path, url: str, names: tuple[str, ...]
) -> None:
    url = url.format(tmp=tmp_path / "data")
    values: list[object] = [-5, "abc"]
    table = {"url": url} | dict(zip(names, values, strict=False))
    with pytest.raises(ConfigError) as info:
        open_storage({"store": table, "layers": [{"type": "scrubb"}]})
    lines = duration_problems(info.value, names)
    assert "-5" in lines[0]
    assert all(line.startswith("[store]: ") for line in lines)
    toml = "\n".join(
        [
            "[store]",
            f'url = "{url}"',
            *(f'{name} = "{value}"' for name, value in zip(names, ["30x", "soon"], strict=False)),
            "[[layers]]",
            'type = "scrubb"',
        ]
    )
    with pytest.raises(ConfigError) as info:
        open_storage(write(tmp_path, toml))
    lines = duration_problems(info.value, names)
    assert "invalid duration '30x'" in lines[0]
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    "make",
    [
        lambda tmp: InMemoryChatStorage(retention="30x"),
        lambda tmp: SQLiteChatStorage(tmp / "c.db", purge_interval=-5),
        lambda tmp: JsonlChatStorage(tmp, retention="abc"),
    ],
    ids=["memory", "sqlite", "jsonl"],
)
def test_a_constructor_called_in_code_raises_invalid_argument(tmp_path: Path, make: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="duration"):
        make(tmp_path)


BUILT: list[int] = []


def positive(value: int) -> None:
    if value < 1:
        raise InvalidArgumentError(f"must be >= 1, got {value}")


class Capped(TransformingChatStorage):
    """A third-party layer whose option declares its check (module level: annotations are
    resolved in the module's namespace)."""

    def __init__(self, inner: Any, *, limit: Annotated[int, Check(positive)] = 1) -> None:
        positive(limit)
        BUILT.append(limit)
        super().__init__(inner, lambda message, key: message)


def test_a_checked_option_of_any_component_is_collected_before_anything_is_built() -> None:
    BUILT.clear()
    registry = Registry(entry_points=False)
    registry.register("layers", "capped", Capped)
    spec = {
        "store": {"type": "memory", "retention": "30x"},
        "layers": [{"type": "capped", "limit": 0}, {"type": "capped", "limit": "x"}],
    }
    with pytest.raises(ConfigError) as info:
        open_storage(spec, registry=registry)
    assert problem_lines(info.value) == [
        "[store]: store 'memory': option 'retention': invalid duration '30x': use seconds or "
        "a number with a unit (ms, s, m, h, d, w), e.g. '30d', '12h', '1.5h'",
        "[[layers]] #1 (capped): layer 'capped': option 'limit': must be >= 1, got 0",
        "[[layers]] #2 (capped): layer 'capped': option 'limit' must be an integer, got 'x'",
    ]
    assert BUILT == []
    stack = open_storage(
        {"store": {"type": "memory"}, "layers": [{"type": "capped", "limit": "3"}]},
        registry=registry,
    )
    assert BUILT == [3]
    assert isinstance(stack.inner, Capped)


def test_a_constructor_refusing_a_value_it_does_not_declare_is_a_config_error() -> None:
    # A rule joining two options stays in the constructor (each value alone is checked).
    with pytest.raises(ConfigError, match="store 'postgresql': need min_size <= max_size") as info:
        open_storage("postgresql://localhost/db?min_size=5&max_size=2")
    assert isinstance(info.value.__cause__, InvalidArgumentError)


# --- the checks a constructor makes are reported with every other problem ---------------


def test_a_rule_joining_options_is_listed_with_the_other_problems(tmp_path: Path) -> None:
    url = f"summarize?trigger_at=5&trigger_tokens=100::scrub?mode=maskk::sqlite:///{tmp_path}/a.db"
    with pytest.raises(ConfigError) as info:
        open_storage(url)
    assert str(info.value).startswith(f"URL {url}: 2 problems:\n")
    assert problem_lines(info.value) == [
        "segment 1 (summarize): layer 'summarize': give trigger_at (pairs) or a token budget, "
        "not both",
        "segment 2 (scrub): layer 'scrub': option 'mode' must be one of 'redact', 'mask'; "
        "got 'maskk'",
    ]
    assert list(tmp_path.iterdir()) == []  # nothing constructed


def test_every_layers_constructor_checks_are_reported_before_anything_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("cryptography")
    monkeypatch.delenv("CHATLAYERS_TEST_UNSET", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf").mkdir()
    path = write(
        tmp_path / "conf",
        """\
        [store]
        type = "sqlite"
        paht = "chats.db"

        [[layers]]
        type = "summarize"
        keep_tokens = 100

        [[layers]]
        type = "encrypt"
        keyring = "keys.db"
        key_env = "CHATLAYERS_TEST_UNSET"

        [[layers]]
        type = "scrub"
        known_values_file = "nope.toml"

        [[layers]]
        type = "summarize"
        trigger_fraction = 0.5
        model = "no-such-model"
        """,
    )
    with pytest.raises(ConfigError) as info:
        open_storage(path)
    lines = problem_lines(info.value)
    assert str(info.value).startswith(f"config {path}: 5 problems:\n")
    assert lines[0].startswith("[store]: store 'sqlite' has no option 'paht' (did you mean")
    assert lines[1] == (
        "[[layers]] #1 (summarize): layer 'summarize': keep_tokens needs a token budget "
        "(trigger_tokens or trigger_fraction)"
    )
    assert lines[2].startswith(
        "[[layers]] #2 (encrypt): layer 'encrypt': the environment variable "
        "CHATLAYERS_TEST_UNSET (key_env) is not set"
    )
    known = tmp_path / "conf" / "nope.toml"  # relative to the config file, named absolute
    assert lines[3] == (
        f"[[layers]] #3 (scrub): layer 'scrub': cannot read known_values_file "
        f"'{known}': No such file or directory"
    )
    assert lines[4].startswith(
        "[[layers]] #4 (summarize): layer 'summarize': no context window known for model "
        "'no-such-model'"
    )
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["conf", "stack.toml"]  # nothing made


def test_a_file_option_of_a_url_is_named_by_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        open_storage("scrub?known_values_file=names.toml::summarize?keep_tokens=3::memory://")
    assert problem_lines(info.value) == [
        f"segment 1 (scrub): layer 'scrub': cannot read known_values_file "
        f"'{tmp_path / 'names.toml'}': No such file or directory",
        "segment 2 (summarize): layer 'summarize': keep_tokens needs a token budget "
        "(trigger_tokens or trigger_fraction)",
    ]
    (tmp_path / "names.toml").write_text('PERSON = ["Ada Lovelace"]\n')
    stack = open_storage("scrub?known_values_file=names.toml::memory://")
    assert isinstance(stack.inner, TransformingChatStorage)


def test_a_component_with_a_bad_option_is_not_checked_as_a_whole() -> None:
    # trigger_tokens is malformed, not missing: "keep_tokens needs a token budget" would mislead.
    with pytest.raises(ConfigError) as info:
        open_storage("summarize?trigger_tokens=many&keep_tokens=5::memory://")
    assert str(info.value) == (
        "URL summarize?trigger_tokens=many&keep_tokens=5::memory://: layer 'summarize': "
        "option 'trigger_tokens' must be an integer, got 'many'"
    )


def test_the_configuration_a_mirror_names_is_checked_with_the_stack(tmp_path: Path) -> None:
    secondary = "scrub?mode=x&secret=mirror-s3cret-value::summarize?keep_tokens=3::memory://"
    url = f"mirror?secondary={quote(secondary, safe='')}::sqlite:///{tmp_path}/a.db?retention=x"
    with pytest.raises(ConfigError) as info:
        open_storage(url)
    text = str(info.value)
    assert "s3cret" not in text
    assert text.splitlines()[1:] == [
        "  - segment 1 (mirror): layer 'mirror': option 'secondary': URL "
        "scrub?mode=x&secret=***::summarize?keep_tokens=3::memory://: 2 problems:",
        "      - segment 1 (scrub): layer 'scrub': option 'mode' must be one of 'redact', "
        "'mask'; got 'x'",
        "      - segment 2 (summarize): layer 'summarize': keep_tokens needs a token budget "
        "(trigger_tokens or trigger_fraction)",
        "  - segment 2 (sqlite): store 'sqlite': option 'retention': invalid duration 'x': "
        "use seconds or a number with a unit (ms, s, m, h, d, w), e.g. '30d', '12h', '1.5h'",
    ]
    assert list(tmp_path.iterdir()) == []


def test_what_only_the_built_stack_can_tell_is_reported_after_the_source() -> None:
    url = "summarize?summaries=store::strict::memory://"
    with pytest.raises(ConfigError) as info:
        open_storage(url)
    assert str(info.value).startswith(
        f"URL {url}: layer 'summarize': summaries='store' needs summary checkpoints"
    )
    with pytest.raises(ConfigError) as stored:  # a store reads its own URL when it is built
        open_storage("summarize::sqlite://a.db")
    assert str(stored.value).startswith(
        "URL summarize::sqlite://a.db: store 'sqlite': 'sqlite://a.db' names a host, not a file"
    )


def test_the_checks_are_those_of_the_registered_built_ins() -> None:
    factories = {f"{factory.__module__}:{factory.__qualname__}" for _, _, factory in built_ins()}
    checked = set(CHECKS)
    assert checked <= factories | {"storage.layers.encrypting.layer:EncryptingChatStorage"}
    assert "storage.layers.summarizing.layer:SummarizingChatStorage" in checked & factories

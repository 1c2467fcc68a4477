"""open_storage: URL chains, dicts and TOML files; option conversion; errors; describe()."""

from __future__ import annotations

import logging
import re
import textwrap
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.config import DEFAULT_URL, open_storage, parse_config
from storage.config.options import convert
from storage.config.parse import parse_url
from storage.config.registry import Registry
from storage.config.stack import Stack, describe
from storage.errors import ConfigError, StorageUnavailableError
from storage.layers.summarizing import SummarizingChatStorage
from storage.layers.transforming import TransformingChatStorage
from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage
from storage.redact import redact_text, redact_url
from storage.stores.memory import InMemoryChatStorage
from storage.stores.sqlite import SQLiteChatStorage
from summarizers.extractive import ExtractiveSummarizer
from summarizers.llm import LiteLLMSummarizer

KEY = ChatKey("u", "s", "a")


def layers_of(stack: Stack) -> list[type]:
    return [type(c) for c in stack.components()]


# --- URL chains -----------------------------------------------------------------------------


def test_url_chain_builds_outermost_first(tmp_path: Path) -> None:
    stack = open_storage(
        f"summarize::transform?transform=tests.config.test_config:keep::sqlite:///{tmp_path}/c.db"
    )
    assert layers_of(stack) == [SummarizingChatStorage, TransformingChatStorage, SQLiteChatStorage]
    assert isinstance(stack, ChatStorage)
    assert isinstance(stack.base, SQLiteChatStorage)
    assert stack.find(SummarizingChatStorage) is stack.inner


def keep(message: ChatMessage, key: ChatKey) -> ChatMessage:
    """A transform used by the tests (referenced as ``tests.config.test_config:keep``)."""
    return message


def test_layer_options_from_query_are_converted_by_declared_type() -> None:
    stack = open_storage("summarize?trigger_at=7&keep_last=3&timeout=2.5&max_buffers=9::memory://")
    layer = stack.find(SummarizingChatStorage)
    assert layer is not None
    assert (layer.trigger_at, layer.keep_last, layer.max_buffers, layer.timeout) == (7, 3, 9, 2.5)
    assert isinstance(layer.trigger_at, int)
    assert isinstance(layer.timeout, float)


def test_nested_summarizer_from_dotted_query_options() -> None:
    stack = open_storage(
        "summarize?summarizer=extractive&summarizer.max_chars=500"
        "&summarizer.summary_role=user::memory://"
    )
    layer = stack.find(SummarizingChatStorage)
    assert layer is not None
    assert layer.summarizer == ExtractiveSummarizer(max_chars=500, summary_role="user")


def test_litellm_summarizer_from_url_with_json_mapping() -> None:
    stack = open_storage(
        "summarize?summarizer=litellm&summarizer.model=gpt-4o-mini&summarizer.retries=0"
        '&summarizer.completion_kwargs={"temperature":0,"mock_response":"ok"}::memory://'
    )
    layer = stack.find(SummarizingChatStorage)
    assert layer is not None
    summarizer = layer.summarizer
    assert isinstance(summarizer, LiteLLMSummarizer)
    assert summarizer.model == "gpt-4o-mini"
    assert summarizer.retries == 0
    assert summarizer.completion_kwargs == {"temperature": 0, "mock_response": "ok"}


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///rel/chats.db", "rel/chats.db"),
        ("sqlite:////ABS/chats.db", "/ABS/chats.db"),
        ("sqlite://:memory:", ":memory:"),
        ("sqlite:///:memory:", ":memory:"),
        ("sqlite:///my%20chats.db", "my chats.db"),
    ],
)
def test_sqlite_url_paths(
    url: str, path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    url = url.replace("/ABS", str(tmp_path))
    stack = open_storage(url)
    assert isinstance(stack.base, SQLiteChatStorage)
    assert stack.base.path == path.replace("/ABS", str(tmp_path))


def test_store_query_options_go_to_the_store(tmp_path: Path) -> None:
    stack = open_storage(f"sqlite:///{tmp_path}/c.db?synchronous=full&busy_timeout=1.5")
    base = stack.base
    assert isinstance(base, SQLiteChatStorage)
    assert base.synchronous == "full"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sqlite://", "has no path"),
        ("memory://somewhere", "takes no location"),
        ("summarize::scrub", "looks like a layer name"),
        ("chats.db", "is not a store URL"),
        ("", "non-empty"),
        ("::memory://", "is not a layer name"),
        ("summarize?trigger_at=1&trigger_at=2::memory://", "'trigger_at' is given twice"),
        ("summarize?summarizer.model=x::memory://", "need summarizer=NAME"),
        ("summarize?x.y=1::memory://", "only nested components"),
        ("sqlit:///x.db", "did you mean 'sqlite'"),
        ("sumarize::memory://", "did you mean 'summarize'"),
        ("summarize?summarizer=extractiv::memory://", "did you mean 'extractive'"),
    ],
)
def test_bad_urls(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        open_storage(url)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "summarize?triger_at=3::memory://",
            r"layer 'summarize' has no option 'triger_at' \(did you mean 'trigger_at'[^)]*\); "
            r"allowed: .*keep_last, .*summarizer, .*trigger_at",
        ),
        (
            "summarize?trigger_at=many::memory://",
            "layer 'summarize': option 'trigger_at' must be an integer",
        ),
        ("summarize?trigger_at=0::memory://", "layer 'summarize': trigger_at must be >= 1"),
        (
            "sqlite://:memory:?synchronous=fast",
            "store 'sqlite': option 'synchronous' must be one of 'off', 'normal', 'full', 'extra'",
        ),
        (
            "summarize?summarizer=extractive&summarizer.max_chars=5::memory://",
            "summarizer 'extractive': max_chars",
        ),
        (
            "summarize?summarizer=litellm&model=gpt-4o::memory://",
            # the layer's model is the tokenizer's; the summarizer's is written apart
            re.escape("summarizer 'litellm' needs option 'model' (in a URL: summarizer.model=...)"),
        ),
        ("transform::memory://", "layer 'transform' needs option 'transform'"),
        ("transform?transform=nomodule_xyz:f::memory://", "cannot import 'nomodule_xyz'"),
    ],
)
def test_bad_options_name_layer_option_and_allowed_values(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        open_storage(url)


# --- conversion by declared type -------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "annotation", "expected"),
    [
        ("3", int, 3),
        (3, int, 3),
        ("2.5", float, 2.5),
        (2, float, 2.0),
        ("true", bool, True),
        ("Off", bool, False),
        (True, bool, True),
        ("a, b,c", list[str], ["a", "b", "c"]),
        ('["a,b", "c"]', list[str], ["a,b", "c"]),
        (["x"], tuple[str, ...], ("x",)),
        ('{"t": 0}', dict[str, Any], {"t": 0}),
        ({"t": 0}, dict[str, Any], {"t": 0}),
        ("12345", str, "12345"),
        ("12345", str | None, "12345"),
        (None, int | None, None),
        ("7", int | None, 7),
        ("mask", Literal["redact", "mask"], "mask"),
        ("2", Literal[1, 2], 2),
        ("x", Any, "x"),
    ],
)
def test_convert(value: object, annotation: object, expected: object) -> None:
    result = convert(value, annotation, "opt")
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    ("value", "annotation", "message"),
    [
        (12345, str, "must be a string, got int 12345 \\(quote it\\)"),  # never guessed
        (1, bool, "must be a boolean"),
        ("maybe", bool, "must be a boolean"),
        (True, int, "must be an integer"),
        (2.5, int, "must be an integer"),
        ("x", float, "must be a number"),
        ("hash", Literal["redact", "mask"], "must be one of 'redact', 'mask'"),
        ({"a": 1}, list[str], "must be a list"),
        ("[oops", list[str], "must be a JSON list"),
        ("{oops", dict[str, Any], "must be a JSON object"),
        ([1], list[str], r"opt\[0\] must be a string"),
    ],
)
def test_convert_refuses(value: object, annotation: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        convert(value, annotation, "opt")


# --- dict and TOML -----------------------------------------------------------------------


def test_dict_config(tmp_path: Path) -> None:
    stack = open_storage(
        {
            "store": {"type": "sqlite", "path": str(tmp_path / "c.db"), "synchronous": "full"},
            "layers": [
                {
                    "type": "summarize",
                    "trigger_at": 5,
                    "summarizer": {"type": "extractive", "max_chars": 300},
                },
                {"type": "transform", "transform": keep},
            ],
        }
    )
    assert layers_of(stack) == [SummarizingChatStorage, TransformingChatStorage, SQLiteChatStorage]
    layer = stack.find(SummarizingChatStorage)
    assert layer is not None
    assert layer.trigger_at == 5
    assert layer.summarizer == ExtractiveSummarizer(max_chars=300)
    assert stack.base.path == str(tmp_path / "c.db")  # type: ignore[attr-defined]


def test_toml_file_with_every_form(tmp_path: Path) -> None:
    config = tmp_path / "chatlayers.toml"
    config.write_text(
        textwrap.dedent(
            f"""
            [store]
            url = "sqlite:///{tmp_path}/chats.db"
            synchronous = "full"

            [[layers]]
            type = "summarize"
            trigger_at = 20
            keep_last = 2
            [layers.summarizer]
            type = "litellm"
            model = "gpt-4o-mini"
            timeout = 10
            completion_kwargs = {{ temperature = 0 }}

            [[layers]]
            type = "transform"
            transform = "tests.config.test_config:keep"
            """
        )
    )
    for spec in (config, str(config)):
        stack = open_storage(spec)
        assert layers_of(stack) == [
            SummarizingChatStorage,
            TransformingChatStorage,
            SQLiteChatStorage,
        ]
        layer = stack.find(SummarizingChatStorage)
        assert layer is not None
        summarizer = layer.summarizer
        assert isinstance(summarizer, LiteLLMSummarizer)
        assert summarizer.timeout == 10.0
        assert isinstance(summarizer.timeout, float)
        assert summarizer.completion_kwargs == {"temperature": 0}
        assert stack.base.synchronous == "full"  # type: ignore[attr-defined]
        assert stack.source == f"config {config}"


def test_toml_chain_url_and_bare_layer_names(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('url = "summarize?trigger_at=4::memory://"\n')
    stack = open_storage(config)
    assert layers_of(stack) == [SummarizingChatStorage, InMemoryChatStorage]
    stack = open_storage({"store": {"url": "memory://"}, "layers": ["summarize"]})
    assert layers_of(stack) == [SummarizingChatStorage, InMemoryChatStorage]


def test_json_config_file(tmp_path: Path) -> None:
    config = tmp_path / "c.json"
    config.write_text(
        '{"store": {"type": "memory"}, "layers": [{"type": "summarize", "keep_last": 1}]}'
    )
    stack = open_storage(config)
    assert layers_of(stack) == [SummarizingChatStorage, InMemoryChatStorage]


def test_toml_native_types_are_checked_not_guessed(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        '[store]\ntype = "memory"\n[[layers]]\ntype = "summarize"\ntrigger_at = "20"\n'
    )
    # A string from TOML is still a string: it is parsed like a URL value (declared int).
    assert open_storage(config).find(SummarizingChatStorage).trigger_at == 20  # type: ignore[union-attr]
    config.write_text(
        '[store]\ntype = "memory"\n[[layers]]\ntype = "summarize"\n'
        '[layers.summarizer]\ntype = "litellm"\nmodel = 4\n'
    )
    with pytest.raises(ConfigError, match="option 'model' must be a string, got int 4"):
        open_storage(config)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, r"no \[store\] table"),
        ({"stor": {}}, "unknown key 'stor' \\(did you mean 'store'\\?\\)"),
        ({"url": "memory://", "store": {"type": "memory"}}, "not both"),
        ({"store": {}}, "needs 'url'"),
        ({"store": "memory://"}, "must be a table"),
        ({"store": {"type": "memory"}, "layers": {"type": "summarize"}}, "must be a list"),
        ({"store": {"type": "memory"}, "layers": [{"trigger_at": 1}]}, r"layers\[0\] needs 'type'"),
        ({"store": {"type": "memory"}, "layers": [3]}, r"layers\[0\] must be a table"),
        ({"store": {"url": "sqlite://:memory:", "type": "redis"}}, "does not match the URL scheme"),
        (
            {"store": {"url": "sqlite://:memory:?synchronous=full", "synchronous": "off"}},
            "given in the URL and the table",
        ),
        ({"store": {"type": "memory", "colour": "red"}}, "store 'memory' has no option 'colour'"),
        ({"store": {"url": "summarize::memory://"}}, "give a chain as the top-level 'url'"),
    ],
)
def test_bad_dicts(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        open_storage(data)


def test_bad_toml_file(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[store\n")
    with pytest.raises(ConfigError, match="is not valid"):
        open_storage(config)
    with pytest.raises(ConfigError, match="cannot read config file"):
        open_storage(tmp_path / "missing.toml")


# --- environment ------------------------------------------------------------------------


def test_env_url_then_config_then_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", "a-secret-for-tests-0123456789")
    monkeypatch.delenv("CHATLAYERS_URL", raising=False)
    monkeypatch.delenv("CHATLAYERS_CONFIG", raising=False)
    stack = open_storage()
    assert stack.source == f"default {DEFAULT_URL}"
    assert [type(c).__name__ for c in stack.components()] == [
        "SummarizingChatStorage",
        "TransformingChatStorage",
        "SQLiteChatStorage",
    ]
    # the default database is in the working directory, opened (created) on first use
    base = stack.base
    assert isinstance(base, SQLiteChatStorage)
    assert (tmp_path / base.path).resolve() == (tmp_path / "chatlayers.db").resolve()
    assert not (tmp_path / "chatlayers.db").exists()
    anyio.run(base.fetch, ChatKey("u", "s", "a"))
    assert (tmp_path / "chatlayers.db").exists()

    monkeypatch.setenv("CHATLAYERS_URL", "summarize::memory://")
    assert layers_of(open_storage()) == [SummarizingChatStorage, InMemoryChatStorage]

    config = tmp_path / "c.toml"
    config.write_text('[store]\nurl = "memory://"\n')
    monkeypatch.setenv("CHATLAYERS_CONFIG", str(config))
    with pytest.raises(ConfigError, match="both CHATLAYERS_URL and CHATLAYERS_CONFIG"):
        open_storage()
    monkeypatch.delenv("CHATLAYERS_URL")
    assert layers_of(open_storage()) == [InMemoryChatStorage]


def test_option_from_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_TRIGGER", "6")
    spec = {
        "store": {"type": "memory"},
        "layers": [{"type": "summarize", "trigger_at_env": "MY_TRIGGER"}],
    }
    assert open_storage(spec).find(SummarizingChatStorage).trigger_at == 6  # type: ignore[union-attr]
    monkeypatch.delenv("MY_TRIGGER")
    with pytest.raises(ConfigError, match="trigger_at_env names 'MY_TRIGGER', which is not set"):
        open_storage(spec)
    spec["layers"][0]["trigger_at"] = 3  # type: ignore[index]
    with pytest.raises(ConfigError, match="give 'trigger_at' or 'trigger_at_env', not both"):
        open_storage(spec)


def test_store_url_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_DB", f"sqlite:///{tmp_path}/env.db")
    stack = open_storage({"store": {"url_env": "MY_DB"}})
    assert stack.base.path == f"{tmp_path}/env.db"  # type: ignore[attr-defined]


# --- the built stack ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_stack_used_directly_and_as_context_manager(tmp_path: Path) -> None:
    url = f"summarize?trigger_at=1&keep_last=1::sqlite:///{tmp_path}/c.db"
    stack = open_storage(url)  # no await needed
    await stack.save(KEY, ChatMessage("user", "hello"))
    await stack.aclose()
    async with open_storage(url) as again:
        assert isinstance(again, Stack)
        assert [m.content for m in await again.fetch(KEY)] == ["hello"]
        assert [m.message.content for m in await again.fetch_all_chats("u", "s")] == ["hello"]
        await again.delete(KEY)
        assert await again.fetch(KEY) == []
        await again.save(KEY, ChatMessage("user", "x"))
        await again.delete_user("u")
        assert await again.base.fetch(KEY) == []


def test_describe_walks_the_stack_outermost_first(tmp_path: Path) -> None:
    stack = open_storage(
        f"summarize?trigger_at=3&summarizer=extractive::transform?transform=tests.config.test_config:keep"
        f"::sqlite:///{tmp_path}/c.db"
    )
    lines = stack.describe().splitlines()
    assert lines == describe(stack).splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("SummarizingChatStorage(trigger_at=3, keep_last=2")
    assert lines[0].endswith(", summarizer=ExtractiveSummarizer(max_chars=2000))")
    assert lines[1] == "TransformingChatStorage(transform=keep)"
    assert lines[2] == f"sqlite:///{tmp_path}/c.db (synchronous=normal)"
    assert describe(stack.inner) == stack.describe()


def test_storage_unavailable_is_not_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "not-a-db").write_text("garbage " * 1000)
    stack = open_storage(f"sqlite:///{tmp_path}/not-a-db")  # opened on first use
    with pytest.raises(StorageUnavailableError, match="not-a-db"):
        anyio.run(stack.fetch, ChatKey("u", "s", "a"))


def test_custom_registry_is_used() -> None:
    reg = Registry(entry_points=False)
    reg.register("stores", "vault", InMemoryChatStorage)
    stack = open_storage("summarize::vault://", registry=reg)
    assert layers_of(stack) == [SummarizingChatStorage, InMemoryChatStorage]
    with pytest.raises(ConfigError, match="unknown store 'vault'"):
        open_storage("vault://")


def test_a_factory_must_build_a_chat_storage() -> None:
    reg = Registry(entry_points=False)
    reg.register("layers", "broken", "tests.config.test_config:not_a_layer")
    with pytest.raises(
        ConfigError, match="layer 'broken' built a dict, which is not a ChatStorage"
    ):
        open_storage("broken::memory://", registry=reg)


def not_a_layer(inner: object) -> dict[str, object]:
    return {}


def test_parse_functions_do_not_build() -> None:
    spec = parse_url("summarize?trigger_at=2::nosuchstore://x")
    assert spec.store.name == "nosuchstore"
    assert spec.layers[0].options == {"trigger_at": "2"}
    assert parse_config({"store": {"type": "memory"}}).store.name == "memory"


# --- passwords are redacted everywhere ----------------------------------------------------

SECRET_URLS = [
    "redis://:s3cret@localhost:6379/0",
    "scrub::redis://:s3cret@localhost:6379/0?prefix=p",
    "postgresql://u:s3cret@h/db",
    "summarize::postgresql://u:s3cret@h:5432/db?sslmode=require",
]


@pytest.mark.parametrize("url", SECRET_URLS)
def test_password_redacted_in_parse_errors_and_reprs(url: str) -> None:
    spec = parse_url(url)
    assert "s3cret" not in repr(spec)
    assert "s3cret" not in spec.source
    assert "***" in spec.source
    with pytest.raises(ConfigError, match="unknown layer 'bogus'") as info:
        open_storage("bogus::" + url)
    assert "s3cret" not in str(info.value)
    assert "***" in str(info.value)


def test_password_redacted_in_redis_stack(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("redis")
    with caplog.at_level(logging.DEBUG, logger="storage.config.construct"):
        stack = open_storage("redis://:s3cret@localhost:6379/0")  # builds, connects lazily
    for text in (repr(stack), stack.describe(), stack.source, caplog.text, str(stack.components())):
        assert "s3cret" not in text
    assert "redis://:***@localhost:6379/0" in stack.describe()
    assert "built stack" in caplog.text


def test_password_redacted_in_postgres_stack(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("asyncpg")
    with caplog.at_level(logging.DEBUG, logger="storage.config.construct"):
        stack = open_storage("summarize::postgresql://u:s3cret@h/db?sslmode=require")  # no connect
    for text in (repr(stack), stack.describe(), stack.source, caplog.text):
        assert "s3cret" not in text
    assert "postgresql://u:***@h/db" in stack.describe()


def test_password_redacted_in_errors_from_options() -> None:
    for url in (
        "redis://:s3cret@localhost:6379/0?ttl=soon",
        "summarize?trigger_at=x::redis://:s3cret@localhost/0",
        "summarize?summarizer=litellm&summarizer.model=m&summarizer.timeout=x"
        '&summarizer.completion_kwargs={"api_key":"sk-s3cret"}::memory://',
    ):
        with pytest.raises(ConfigError) as info:
            open_storage(url)
        chain = [info.value]
        while chain[-1].__cause__ is not None:
            chain.append(chain[-1].__cause__)  # type: ignore[arg-type]
        for error in chain:
            assert "s3cret" not in str(error), error


def test_secret_options_redacted_in_describe_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_KEY", "sk-s3cret-value")
    spec = {
        "store": {"type": "memory"},
        "layers": [
            {
                "type": "summarize",
                "summarizer": {
                    "type": "litellm",
                    "model": "gpt-4o-mini",
                    "completion_kwargs": {"api_key": "sk-inline-s3cret"},
                },
            }
        ],
    }
    stack = open_storage(spec)
    assert "s3cret" not in repr(stack)
    assert "s3cret" not in stack.describe()
    summarize = stack.describe().splitlines()[0]
    assert summarize.endswith(
        "summarizer=LiteLLMSummarizer(model='gpt-4o-mini', timeout=30.0, retries=2))"
    )
    spec["layers"][0]["summarizer"]["retries"] = "x"  # type: ignore[index]
    with pytest.raises(ConfigError) as info:
        open_storage(spec)
    assert "s3cret" not in str(info.value)


def test_secret_inside_a_json_option_is_redacted_in_the_spec_repr() -> None:
    spec = parse_url(
        "summarize?summarizer=litellm&summarizer.model=m"
        '&summarizer.completion_kwargs={"api_key":"sk-s3cret"}::memory://'
    )
    assert "s3cret" not in repr(spec)
    assert '{"api_key":"***"}' in repr(spec)


def test_env_variable_names_are_not_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHATLAYERS_TEST_UNSET", raising=False)
    with pytest.raises(ConfigError, match="secret_env names 'CHATLAYERS_TEST_UNSET', which is"):
        open_storage("scrub?secret_env=CHATLAYERS_TEST_UNSET::memory://")
    monkeypatch.setenv("CHATLAYERS_TEST_SECRET", "s3cret-from-env")
    stack = open_storage("scrub?secret_env=CHATLAYERS_TEST_SECRET::memory://")
    assert stack.source == "URL scrub?secret_env=CHATLAYERS_TEST_SECRET::memory://"
    assert "s3cret" not in repr(stack)


def test_redact_helpers() -> None:
    assert redact_url("redis://:pw@h:1/0") == "redis://:***@h:1/0"
    assert redact_url("postgresql://u:pw@h/db?password=x&sslmode=require") == (
        "postgresql://u:***@h/db?password=***&sslmode=require"
    )
    assert redact_url("redis://h:6379/0") == "redis://h:6379/0"
    assert redact_url("a::redis://u:p@w@h/0") == "a::redis://u:***@h/0"
    assert redact_text("error: token abc123 refused", {"abc123"}) == "error: token *** refused"


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
# A password that is also a substring of the username is redacted inside it too.
@given(
    password=st.text(min_size=4, max_size=30).filter(lambda s: s.strip() == s and s not in "user")
)
def test_any_password_is_redacted(password: str) -> None:
    quoted = quote(password, safe="")
    url = f"summarize?trigger_at=x::redis://user:{quoted}@localhost:6379/0"
    spec = parse_url(url)
    with pytest.raises(ConfigError) as info:
        open_storage(spec)
    for text in (spec.source, repr(spec), str(info.value)):
        assert f":{password}@" not in text
        assert f":{quoted}@" not in text
        assert "user:***@" in text


def test_short_secrets_redacted_as_tokens_without_garbling_text() -> None:
    text = "SummarizingChatStorage(table=public.chat_messages) password a rejected"
    assert redact_text(text, ["a"]) == (
        "SummarizingChatStorage(table=public.chat_messages) password *** rejected"
    )
    assert redact_text("token=s3cret-value-1234;", ["s3cret-value-1234"]) == "token=***;"


def test_token_budgets_are_shown_but_tokens_are_secret() -> None:
    from storage.redact import is_sensitive

    assert not is_sensitive("trigger_tokens")
    assert not is_sensitive("max_input_tokens")
    for name in (
        "token",
        "api_token",
        "access_token_value",
        "token_url",
        "secret",
        "api_key",
        "keys",
        "master_keys",
        "key",
    ):
        assert is_sensitive(name), name

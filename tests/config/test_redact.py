"""Redaction (storage.redact): a secret is masked where it stands as a value, never inside the
words around it, and only options that hold a secret are treated as secret."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage.config import open_storage
from storage.config.options import declared_options
from storage.errors import ConfigError
from storage.redact import is_sensitive, redact_text, secrets_of_options, secrets_of_url
from tests.cli.helpers import run
from tests.config.built_ins import built_ins

DURATION_HINT = "use seconds or a number with a unit (ms, s, m, h, d, w), e.g. '30d'"


def test_a_one_letter_secret_leaves_the_words_of_an_error_whole(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"scrub?secret=e::sqlite:///{tmp_path}/a.db?retention=30x"
    with pytest.raises(ConfigError) as info:
        open_storage(url)
    text = str(info.value)
    assert DURATION_HINT in text  # "e.g." was "***.g."
    assert "scrub?secret=***::" in text
    assert "secret=e" not in text
    code, out, err = run(capsys, "--url", url, "stack")
    assert code != 0
    assert DURATION_HINT in err
    assert "secret=e" not in out + err


def test_json_keys_are_no_secret_and_leave_the_error_whole(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text(
        textwrap.dedent(
            """\
            [store]
            url = "sqlite:///a.db"
            retention = "30x"

            [[layers]]
            type = "scrub"
            json_keys = ["a"]
            """
        )
    )
    with pytest.raises(ConfigError) as info:
        open_storage(path)
    text = str(info.value)
    assert "***" not in text
    assert text.startswith(f"config {path}: 2 problems:")
    assert DURATION_HINT in text
    assert "layer 'scrub': option 'json_keys' must be a table/mapping, got list" in text


def test_json_keys_show_in_the_stack_source(capsys: pytest.CaptureFixture[str]) -> None:
    url = 'scrub?secret=e&json_keys={"PERSON":["a"]}::memory://'
    code, out, err = run(capsys, "--url", url, "stack")
    assert code == 0, err
    assert 'scrub?secret=***&json_keys={"PERSON":["a"]}::memory://' in out
    assert "secret=config" in out
    assert "secret=e" not in out


@pytest.mark.parametrize(
    ("text", "secret", "expected"),
    [
        ("got 'e', e.g. '30d'", "e", "got '***', e.g. '30d'"),
        ('{"api_key":"k1"} k1x xk1', "k1", '{"api_key":"***"} k1x xk1'),
        (
            "scrub?secret=ab&mode=x::sqlite:///ab.db",
            "ab",
            "scrub?secret=***&mode=x::sqlite:///ab.db",
        ),
        ("redis://u:pw@h/0 auth pw failed.", "pw", "redis://u:***@h/0 auth *** failed."),
        (
            "password a rejected; a.db, a-b, a_b, don't",
            "a",
            "password *** rejected; a.db, a-b, a_b, don't",
        ),
        ("the secret t. (t) [t,t] won't", "t", "the secret ***. (***) [***,***] won't"),
        (
            "was 's3cret-value-1234' and xs3cret-value-1234y",
            "s3cret-value-1234",
            "was '***' and x***y",
        ),
    ],
)
def test_a_secret_is_masked_where_it_stands_as_a_value(
    text: str, secret: str, expected: str
) -> None:
    assert redact_text(text, [secret]) == expected


def test_a_secret_is_masked_as_repr_and_json_write_it() -> None:
    for secret in ("p'q", 'p"q\\z', "a\nb", "clé", "sk-long'secret\\value"):
        for written in (repr(secret), json.dumps(secret), json.dumps(secret, ensure_ascii=False)):
            shown = redact_text(f"got {written}; ok", [secret])
            assert shown in ("got '***'; ok", 'got "***"; ok'), (secret, written)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(min_size=1, max_size=12).filter(lambda s: s.strip() == s and "*" not in s))
def test_a_secret_is_never_printed_as_a_value(secret: str) -> None:
    url = f"scrub?secret={quote(secret, safe='')}&mode=x::memory://"
    text = (
        f"URL {url}: option 'secret': got {secret!r}; "
        f"{json.dumps({'api_key': secret})}; password {secret} rejected"
    )
    shown = redact_text(text, secrets_of_url(url))
    for written in (repr(secret), json.dumps(secret), f" {secret} ", f"={quote(secret, safe='')}&"):
        assert written not in shown, shown


def test_names_that_hold_a_secret() -> None:
    for name in (
        "secret",
        "password",
        "db_pass",
        "pwd",
        "token",
        "api_token",
        "auth_token",
        "token_url",
        "apiKey",
        "api_key",
        "key",
        "keys",
        "master_keys",
        "aws_access_key_id",
        "credentials",
    ):
        assert is_sensitive(name), name


def test_names_that_hold_no_secret() -> None:
    for name in (
        "json_keys",  # the JSON field names whose values are scrubbed
        "max_cached_keys",  # a count
        "min_password_length",
        "secret_source",  # where the secret came from: config, env:VARIABLE
        "secret_env",
        "key_env",
        "key_file",
        "known_values_file",
        "trigger_tokens",
        "keep_tokens",
        "max_input_tokens",
        "tokens",
        "tokenizer",
        "keyring",
        "mode",
    ):
        assert not is_sensitive(name), name


def test_the_built_in_options_that_hold_a_secret() -> None:
    """Every option a built-in store, layer or summarizer declares, classified: a new option
    whose name looks secret (or hides one) must be looked at."""
    secret = set()
    for kind, name, factory in built_ins():
        declared, _ = declared_options(factory, skip_first=kind == "layers")
        secret |= {(name, option) for option in declared if is_sensitive(option)}
    assert secret <= {("encrypt", "keys"), ("otel", "secret"), ("scrub", "secret")}
    assert ("scrub", "secret") in secret


def test_only_secret_options_are_collected_as_secrets() -> None:
    options = {"json_keys": {"PERSON": ["a"]}, "secret_source": "config", "secret": "s"}
    assert secrets_of_options(options) == {"s"}
    assert secrets_of_url('scrub?json_keys={"PERSON":["a"]}&secret=s::memory://') == {"s"}

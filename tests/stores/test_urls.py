"""Store URL helpers every store's ``from_url`` uses (``storage.stores.urls``)."""

from __future__ import annotations

import os

import pytest

from storage.errors import ConfigError
from storage.stores.urls import check_query, drop_query, path_from_url, pop_query


@pytest.mark.parametrize(
    ("url", "scheme", "path"),
    [
        ("sqlite:///chats.db", "sqlite", "chats.db"),
        ("sqlite:///dir/chats.db?synchronous=normal", "sqlite", "dir/chats.db"),
        ("sqlite:////var/lib/chats.db", "sqlite", "/var/lib/chats.db"),
        ("sqlite://:memory:", "sqlite", ":memory:"),
        ("SQLITE:///x.db", "sqlite", "x.db"),
        ("sqlite:///with%3Fquestion.db", "sqlite", "with?question.db"),
        ("jsonl://chats", "jsonl", "chats"),
        ("jsonl://chats/sub?fsync=true", "jsonl", "chats/sub"),
        ("jsonl:///var/chats", "jsonl", "/var/chats"),
    ],
)
def test_path_from_url(url: str, scheme: str, path: str) -> None:
    assert path_from_url(url, scheme) == path


def test_path_from_url_expands_home() -> None:
    assert path_from_url("jsonl://~/chats", "jsonl") == os.path.expanduser("~/chats")


def test_two_slash_sqlite_refused_with_right_spelling() -> None:
    with pytest.raises(ConfigError, match=r"sqlite:///x\.db"):
        path_from_url("sqlite://x.db", "sqlite")


@pytest.mark.parametrize(
    ("url", "scheme"), [("sqlite://", "sqlite"), ("sqlite:///", "sqlite"), ("jsonl://", "jsonl")]
)
def test_no_path_refused(url: str, scheme: str) -> None:
    with pytest.raises(ConfigError, match="has no path"):
        path_from_url(url, scheme)


def test_not_a_url_refused() -> None:
    with pytest.raises(ConfigError, match="not a sqlite:// URL"):
        path_from_url("x.db", "sqlite")


def test_unknown_query_option_refused_with_suggestion() -> None:
    with pytest.raises(ConfigError, match=r"'synchronus'.*did you mean 'synchronous'"):
        path_from_url("sqlite:///x.db?synchronus=off", "sqlite", options={"synchronous": "off"})
    assert path_from_url("sqlite:///x.db?synchronous=off", "sqlite", options={"synchronous"})
    with pytest.raises(ConfigError, match="unknown option 'b'"):
        check_query("memory://?b=1", "memory", ())


def test_drop_query_keeps_driver_options_verbatim() -> None:
    url = "postgresql://u:p%40ss@h:5432/db?schema=chat&sslmode=require&application_name=a%20b"
    assert drop_query(url, {"schema"}) == (
        "postgresql://u:p%40ss@h:5432/db?sslmode=require&application_name=a%20b"
    )
    assert drop_query(url, {"schema", "sslmode", "application_name"}) == (
        "postgresql://u:p%40ss@h:5432/db"
    )
    assert drop_query("redis://h/0", {"prefix"}) == "redis://h/0"


def test_pop_query_still_works() -> None:
    url, ours = pop_query(
        "redis://h/0?prefix=p&ttl=5&health_check_interval=3", frozenset({"prefix", "ttl"})
    )
    assert ours == {"prefix": "p", "ttl": "5"}
    assert url == "redis://h/0?health_check_interval=3"

"""``chatlayers purge`` says what each store's retention is: on Redis it is a ``ttl`` the server
applies itself (``?retention=`` is not a Redis option), so a purge there has nothing to do; the
other stores take ``?retention=``. Redis runs as a real ``redis-server`` (tests/servers.py)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import anyio
import pytest

from storage import open_storage
from storage.message import ChatKey, ChatMessage
from tests.cli.helpers import run

pytest_plugins = ["tests.servers"]

KEY = ChatKey("ada", "trip", "assistant")


def redis(redis_url: str, query: str = "") -> str:
    """A URL of its own key prefix on the shared server, with ``query`` added."""
    return f"{redis_url}?prefix=t{uuid.uuid4().hex[:12]}{query}"


async def save_and_count(url: str) -> int:
    async with open_storage(url) as store:
        await store.save(KEY, ChatMessage("user", "hello"))
        return len(await store.fetch(KEY))


async def count(url: str) -> int:
    async with open_storage(url) as store:
        return len(await store.fetch(KEY))


@pytest.mark.parametrize("summarizing", [False, True])
def test_purge_on_redis_with_a_ttl_has_nothing_to_do_and_says_the_server_expires(
    redis_url: str, capsys: pytest.CaptureFixture[str], summarizing: bool
) -> None:
    url = redis(redis_url, "&ttl=30d")
    assert anyio.run(save_and_count, url) == 1
    stack = f"summarize::{url}" if summarizing else url
    code, out, err = run(capsys, "--url", stack, "purge", "--dry-run")
    assert code == 0, err
    assert "would purge nothing" in out
    assert "expires every key of a session on the server itself, 30d after" in out
    assert "retention" not in out + err  # Redis has no such option
    code, out, err = run(capsys, "--url", stack, "purge", "--dry-run", "--json")
    assert code == 0, err
    assert json.loads(out) == {
        "dry_run": True,
        "messages": 0,
        "conversations": 0,
        "expires_after_seconds": 30 * 86400.0,
    }
    code, out, err = run(capsys, "--url", stack, "purge", "--yes")
    assert code == 0, err
    assert "purged nothing" in out
    assert anyio.run(count, url) == 1  # the TTL, not purge, removes it


def test_purge_on_redis_without_a_ttl_recommends_the_ttl_option_redis_takes(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = redis(redis_url)
    code, out, err = run(capsys, "--url", url, "purge", "--dry-run")
    assert code == 1
    assert "?ttl=30d" in err
    assert "?retention=" not in err
    hint = err.rpartition("e.g. ")[2].rstrip(")\n")
    code, out, err = run(capsys, "--url", url + "&" + hint.lstrip("?"), "purge", "--dry-run")
    assert code == 0, err  # the option recommended is one Redis takes
    assert "would purge nothing" in out


@pytest.mark.parametrize("scheme", ["sqlite", "jsonl", "memory"])
def test_purge_on_a_store_without_retention_recommends_retention(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], scheme: str
) -> None:
    url = {
        "sqlite": f"sqlite:///{tmp_path}/chats.db",
        "jsonl": f"jsonl://{tmp_path}/chats",
        "memory": "memory://",
    }[scheme]
    if scheme != "memory":
        anyio.run(save_and_count, url)  # the store exists (purge refuses a missing one)
    code, _, err = run(capsys, "--url", url, "purge", "--dry-run")
    assert code == 1
    assert "has none (set retention=..., e.g. ?retention=30d)" in err
    hint = err.rpartition("e.g. ")[2].rstrip(")\n")
    code, out, err = run(capsys, "--url", url + hint, "purge", "--dry-run")
    assert code == 0, err  # the option recommended is one the store takes
    assert "would purge 0 messages older than 30d" in out


def test_a_ttl_on_a_postgresql_url_points_to_retention_before_any_connect(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # No server: the URL is refused as config (before, asyncpg sent ttl to the server as a
    # setting and every connect failed with "unrecognized configuration parameter").
    code, out, err = run(
        capsys, "--url", "postgresql://me:pw-secret@127.0.0.1:9/db?ttl=30d", "purge"
    )
    assert code == 1
    assert "'ttl' is not an option of the PostgreSQL store (did you mean 'retention'?" in err
    assert "pw-secret" not in err
    assert not out

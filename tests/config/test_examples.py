"""Every shipped deployment config (examples/config, docs/deployments.md) builds a stack."""

from __future__ import annotations

import tomllib
import uuid
from pathlib import Path

import pytest

from storage.config import open_storage
from storage.config.stack import Stack
from storage.layers.summarizing import SummarizingChatStorage
from storage.layers.transforming import TransformingChatStorage
from storage.message import ChatKey, ChatMessage
from storage.stores.sqlite import SQLiteChatStorage
from tests.paths import REPO, code_blocks, docs_text

pytest_plugins = ["tests.servers"]

ROOT = REPO
CONFIGS = ROOT / "examples" / "config"
EXAMPLES = ("laptop", "staging", "production")
SECRET = "example-secret-0123456789abcdef"


def stack_configs() -> set[str]:
    """Names of the files under examples/config that describe a stack (not data files)."""
    names = set()
    for path in CONFIGS.glob("*.toml"):
        data = tomllib.loads(path.read_text())
        if "store" in data or "url" in data:
            names.add(path.stem)
    return names


def test_every_example_config_is_tested() -> None:
    assert stack_configs() == set(EXAMPLES)


@pytest.fixture
def deployment_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # the laptop database is relative to the working directory
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", SECRET)
    # Unreachable hosts: building a stack must not connect anywhere.
    monkeypatch.setenv("CHATLAYERS_REDIS_URL", "redis://:s3cret@redis.invalid:6379/0")
    monkeypatch.setenv("CHATLAYERS_POSTGRES_DSN", "postgresql://chat:s3cret@db.invalid:5432/chat")


def kinds(stack: Stack) -> list[str]:
    return [type(component).__name__ for component in stack.components()]


@pytest.mark.usefixtures("deployment_env")
@pytest.mark.parametrize("name", EXAMPLES)
def test_example_config_builds_without_connecting(name: str) -> None:
    pytest.importorskip("redis")
    pytest.importorskip("asyncpg")
    stack = open_storage(CONFIGS / f"{name}.toml")
    expected = {
        "laptop": ["SQLiteChatStorage"],
        "staging": ["TransformingChatStorage", "RedisChatStorage"],
        "production": ["SummarizingChatStorage", "TransformingChatStorage", "PostgresChatStorage"],
    }[name]
    assert kinds(stack) == expected
    description = stack.describe()
    assert "s3cret" not in description + repr(stack) + stack.source
    assert len(description.splitlines()) == len(expected)


@pytest.mark.usefixtures("deployment_env")
def test_production_config_options() -> None:
    pytest.importorskip("asyncpg")
    stack = open_storage(CONFIGS / "production.toml")
    summarizing = stack.find(SummarizingChatStorage)
    assert summarizing is not None
    assert (summarizing.trigger_at, summarizing.keep_last, summarizing.max_buffers) == (
        20,
        2,
        50000,
    )
    summarizer = summarizing.summarizer
    assert type(summarizer).__name__ == "LiteLLMSummarizer"
    assert summarizer.model == "gpt-4o-mini"  # type: ignore[attr-defined]
    assert summarizer.completion_kwargs == {"temperature": 0}  # type: ignore[attr-defined]
    scrub = stack.find(TransformingChatStorage)
    assert scrub is not None
    assert "known_values=3" in scrub.describe()  # known_pii.toml, relative to the config file


@pytest.mark.anyio
async def test_laptop_config_stores_and_fetches(deployment_env: None, tmp_path: Path) -> None:
    async with open_storage(CONFIGS / "laptop.toml") as stack:
        assert isinstance(stack.base, SQLiteChatStorage)
        key = ChatKey("u", "s", "a")
        await stack.save(key, ChatMessage("user", "hello"))
        assert [m.content for m in await stack.fetch(key)] == ["hello"]
    assert (tmp_path / "chatlayers-laptop.db").exists()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # redis-py is asyncio-only
async def test_staging_config_on_a_real_redis(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", SECRET)
    monkeypatch.setenv("CHATLAYERS_REDIS_URL", redis_url)
    key = ChatKey(f"u-{uuid.uuid4().hex}", "s", "a")
    async with open_storage(CONFIGS / "staging.toml") as stack:
        await stack.save(key, ChatMessage("user", "write to ada@example.org"))
        (stored,) = await stack.fetch(key)
        assert isinstance(stored.content, str)
        assert "ada@example.org" not in stored.content
        assert "<EMAIL_ADDRESS_" in stored.content
        await stack.delete_user(key.user_id)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # asyncpg is asyncio-only
async def test_production_config_on_a_real_postgres(
    anyio_backend: str, monkeypatch: pytest.MonkeyPatch, postgres_dsn: str
) -> None:
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", SECRET)
    monkeypatch.setenv("CHATLAYERS_POSTGRES_DSN", postgres_dsn)
    key = ChatKey(f"u-{uuid.uuid4().hex}", "s", "a")
    async with open_storage(CONFIGS / "production.toml") as stack:
        # A short history: pure delegation, so no LLM is called.
        await stack.save(key, ChatMessage("user", "I am Ada Lovelace, call +1 415 555 0100"))
        (stored,) = await stack.fetch(key)
        assert isinstance(stored.content, str)
        assert "Ada Lovelace" not in stored.content
        assert "<PERSON_" in stored.content
        await stack.delete_user(key.user_id)


def test_docs_deployments_match_the_example_files() -> None:
    docs = docs_text()
    for name in (*EXAMPLES, "known_pii"):
        text = (CONFIGS / f"{name}.toml").read_text()
        assert f"```toml\n{text}```" in docs, f"the docs' {name}.toml differs from the file"


TOML_BLOCKS = code_blocks("toml")


def test_every_toml_block_of_the_docs_parses() -> None:
    assert len(TOML_BLOCKS) >= 7
    for block in TOML_BLOCKS:
        tomllib.loads(block)  # raises on a block that is not valid TOML


@pytest.mark.usefixtures("deployment_env")
@pytest.mark.parametrize(
    "block",
    [b for b in TOML_BLOCKS if "store" in tomllib.loads(b)],
    ids=lambda b: b.splitlines()[0][:40],
)
def test_every_stack_config_of_the_docs_builds(
    block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATLAYERS_NEW_DSN", "memory://")
    (tmp_path / "known_pii.toml").write_text((CONFIGS / "known_pii.toml").read_text())
    config = tmp_path / "stack.toml"
    config.write_text(block)
    stack = open_storage(config)  # nothing is opened yet
    assert len(stack.describe().splitlines()) == 1 + len(tomllib.loads(block).get("layers", []))

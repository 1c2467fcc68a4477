"""The summarizing layer's options from URLs and TOML, and the shipped
production config running coherent, shared summaries over a real PostgreSQL."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from storage import open_storage
from storage.config.registry import Registry
from storage.errors import ConfigError
from storage.layers.summarizing import SummarizingChatStorage
from storage.message import ChatKey, ChatMessage
from storage.stores.memory import InMemoryChatStorage
from tests.layers.summarizing.test_layer import FakeSummarizer, pairs
from tests.paths import REPO

pytestmark = pytest.mark.anyio

KEY = ChatKey("u", "s", "a")
CONFIGS = REPO / "examples" / "config"


def layer_of(stack: Any) -> SummarizingChatStorage:
    layer = stack.find(SummarizingChatStorage)
    assert layer is not None
    return layer  # type: ignore[no-any-return]


def test_url_options_are_converted_by_their_declared_types(tmp_path: Path) -> None:
    url = (
        "summarize?on_error=fallback&coherence=process&lease_ttl=20&retry_backoff=1.5"
        f"&trigger_at=3&summary_role=assistant::sqlite:///{tmp_path / 'x.db'}"
    )
    layer = layer_of(open_storage(url))
    assert layer.on_error == "fallback"
    assert layer.coherence == "process"
    assert layer.lease_ttl == 20.0
    assert layer.trigger_at == 3
    assert layer.summary_role == "assistant"
    assert layer.summaries == "store"  # the default where the store keeps checkpoints
    memory = layer_of(open_storage(f"summarize?summaries=memory::sqlite:///{tmp_path / 'y.db'}"))
    assert memory.summaries == "memory"
    assert "summaries=store" in open_storage(url).describe()


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("on_error=ignore", "on_error"),
        ("coherence=none", "coherence"),
        ("summaries=disk", "summaries"),
        ("lease_ttl=-1", "lease_ttl"),
    ],
)
def test_bad_option_values_are_config_errors(query: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        open_storage(f"summarize?{query}::memory://")


class Down:
    """A summarizer whose model is down."""

    calls = 0  # class-wide: the registry builds its own instances

    async def __call__(self, history: list[ChatMessage], keep_last: int) -> list[ChatMessage]:
        Down.calls += 1
        raise ConnectionError("model down")


async def test_fallback_from_a_url_never_fails_a_fetch(tmp_path: Path) -> None:
    Down.calls = 0
    registry = Registry(entry_points=False)
    registry.register("summarizers", "down", Down)
    url = "summarize?on_error={}&trigger_at=2&summarizer=down::sqlite:///" + str(tmp_path / "x.db")
    async with open_storage(url.format("fallback"), registry=registry) as stack:
        stored = await stack.save_messages(KEY, pairs(4))
        view = await stack.fetch(KEY)  # 8 > 4: the summarizer is called and fails
        assert Down.calls == 1
        assert await stack.fetch(KEY) == view  # within the backoff: no new call
        assert Down.calls == 1
        assert view == stored[-4:]  # the newest raw window that fits the trigger
        assert layer_of(stack).summary_failures == 1
    async with open_storage(url.format("raise"), registry=registry) as stack:
        with pytest.raises(Exception, match="model down"):
            await stack.fetch(KEY)
        assert Down.calls == 2


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_production_config_runs_coherent_shared_summaries(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    pytest.importorskip("litellm")
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # never fetch a price list
    sep = "&" if "?" in postgres_dsn else "?"
    monkeypatch.setenv(
        "CHATLAYERS_POSTGRES_DSN", f"{postgres_dsn}{sep}schema=p{uuid.uuid4().hex[:8]}"
    )
    monkeypatch.setenv("CHATLAYERS_PII_SECRET", "production-test-secret-0123456789")
    fake = FakeSummarizer()
    workers = [open_storage(CONFIGS / "production.toml") for _ in range(2)]
    try:
        layers = [layer_of(w) for w in workers]
        for layer in layers:
            assert (layer.summaries, layer.coherence, layer.on_error) == (
                "store",
                "store",
                "fallback",
            )
            layer.summarizer = fake  # no LLM in tests: the same layer, a fake model
        a, b = workers
        for n in range(21):  # 42 messages: one crossing of trigger_at=20
            await (a if n % 2 else b).save_messages(KEY, pairs(1, start=n))
            await a.fetch(KEY)
        await b.save(KEY, ChatMessage("user", "mail me at ana@example.com"))
        view_a, view_b = await a.fetch(KEY), await b.fetch(KEY)
        assert view_a == view_b
        assert view_a[0].is_summary
        assert "ana@example.com" not in view_a[-1].text  # scrubbed below the summarizer
        assert len(fake.calls) == 1  # one call for the crossing, fleet-wide
        restarted = open_storage(CONFIGS / "production.toml")
        try:
            layer_of(restarted).summarizer = fake
            assert await restarted.fetch(KEY) == view_a
            assert len(fake.calls) == 1  # a restart makes no call
        finally:
            await restarted.aclose()
    finally:
        for w in workers:
            await w.aclose()


def test_a_bad_summarizing_option_is_a_config_error_from_code_and_url() -> None:
    with pytest.raises(ConfigError, match="trigger_at must be >= 1"):
        SummarizingChatStorage(InMemoryChatStorage(), trigger_at=0)
    with pytest.raises(ConfigError, match="trim_tool_results"):
        SummarizingChatStorage(InMemoryChatStorage(), trim_tool_results=5)
    with pytest.raises(ConfigError, match="keep_last"):
        open_storage("summarize?keep_last=-1::memory://")
    with pytest.raises(ConfigError, match="lease_ttl"):
        open_storage(
            {"store": {"url": "memory://"}, "layers": [{"type": "summarize", "lease_ttl": 0}]}
        )


def test_an_unknown_context_window_gives_each_remedy_once(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError) as unknown:
        SummarizingChatStorage(InMemoryChatStorage(), trigger_fraction=0.5, model="ollama/x-7b")
    assert str(unknown.value) == (
        "no context window known for model 'ollama/x-7b' in litellm's bundled model data; "
        "for a model litellm does not know, give its context window in tokens with "
        "context_window=, or give trigger_tokens"
    )
    # Without litellm, no model is known: context_window= is no remedy for a known model.
    import importlib.util

    import storage.tokens

    def no_data() -> dict[str, int]:
        raise ConfigError("model context windows need litellm's model data: pip install x")

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(storage.tokens, "_context_windows", no_data)
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "litellm" else real_find_spec(name, *a),
    )
    with pytest.raises(ConfigError) as missing:
        SummarizingChatStorage(InMemoryChatStorage(), trigger_fraction=0.5, model="gpt-4o")
    assert str(missing.value) == (
        "model context windows need litellm's model data: pip install x; or give trigger_tokens"
    )


def test_trigger_fraction_with_a_declared_context_window() -> None:
    layer = SummarizingChatStorage(
        InMemoryChatStorage(),
        trigger_fraction=0.5,
        model="hosted_vllm/my-model",
        context_window=32_768,
    )
    assert layer.trigger_tokens == 16_384
    with pytest.raises(ConfigError, match="context_window="):
        SummarizingChatStorage(
            InMemoryChatStorage(), trigger_fraction=0.5, model="ollama/my-finetune-7b"
        )
    stack = open_storage(
        "summarize?trigger_fraction=0.25&model=ollama/llama3&context_window=8192::memory://"
    )
    found = stack.find(SummarizingChatStorage)
    assert found is not None
    assert found.trigger_tokens == 2048
    with pytest.raises(ConfigError, match="context_window"):
        SummarizingChatStorage(InMemoryChatStorage(), context_window=8192)

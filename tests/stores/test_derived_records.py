"""Derived records on every persistent store: an unreadable summary checkpoint is logged
once per record (not once per read) and counted in ``corrupt_derived``, through the public
API; the kit's fault scenarios (``storage.testing.fault_tests``) cover the rest."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from storage.layers.summarizing import SummarizingChatStorage
from storage.message import ChatKey, ChatMessage
from storage.testing import open_store
from storage.testing.harness import call_hook
from tests.conformance.stacks import HARNESSES

pytestmark = pytest.mark.anyio

KEY = ChatKey("derived", "session", "agent")
STORES = [
    "sqlite",
    "jsonl",
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("postgres", marks=pytest.mark.postgres),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # redis-py and asyncpg are asyncio-only


def _history() -> list[ChatMessage]:
    out = []
    for n in range(5):
        out.append(ChatMessage("user", f"question {n}"))
        out.append(ChatMessage("assistant", f"answer {n}"))
    return out


@pytest.mark.parametrize("name", STORES)
async def test_an_unreadable_checkpoint_is_logged_once_and_counted(
    name: str, tmp_path: Path, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    harness = HARNESSES[name][0](tmp_path, request)
    assert harness.damage is not None
    store: Any = await open_store(harness.open)
    try:
        layer = SummarizingChatStorage(store, trigger_at=2, keep_last=1)
        await layer.save_messages(KEY, _history())
        assert (await layer.fetch(KEY))[0].is_summary
        assert store.corrupt_derived == 0
        await call_hook(harness.damage, "checkpoint-json", KEY)
        caplog.set_level(logging.WARNING, "storage.stores.derived")
        for _ in range(5):
            assert await store.load_checkpoint(KEY) is None
        logged = [r for r in caplog.records if r.name == "storage.stores.derived"]
        assert len(logged) == 1, [r.getMessage() for r in logged]
        assert "checkpoint" in logged[0].getMessage()
        assert store.corrupt_derived >= 1
        assert store.derived_log.kinds["checkpoint"] >= 1
        # A new worker serves the record and rewrites the checkpoint; reading it is quiet again.
        view = await SummarizingChatStorage(store, trigger_at=2, keep_last=1).fetch(KEY)
        assert view[0].is_summary
        caplog.clear()
        assert await store.load_checkpoint(KEY) is not None
        assert not [r for r in caplog.records if r.name == "storage.stores.derived"]
    finally:
        await store.aclose()

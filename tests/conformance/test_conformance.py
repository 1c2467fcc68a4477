"""The conformance suite: the kit of ``storage.testing`` over every built-in store and stack.

One ``ConformanceSuite`` subclass per base store; each expands to every rule of the kit over
the layerings ``plain``, ``scrub`` and ``summarize::scrub`` and the store's anyio backends,
the ability tests wherever ``find_ability`` finds the ability, the layer paths and hostile
inputs, and the reliability scenarios the store can have. The real-data round trips below are
chatlayers' own addition (the datasets live in the repository, not in the wheel).
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC
from pathlib import Path
from typing import Any, ClassVar

import pytest

from storage.message import ChatKey, ChatMessage
from storage.protocol import ChatStorage
from storage.testing import ConformanceSuite, ServerControl, StoreHarness
from storage.testing.protocol_tests import transforms_content
from tests.conformance.stacks import HARNESSES

DATA = Path(__file__).resolve().parents[2] / "examples" / "data"


def load_conversations(name: str) -> list[dict[str, Any]]:
    with (DATA / name).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class RealData:
    """Round trips of real conversations (tau-bench, OASST, SWE-agent), on every stack."""

    @pytest.mark.parametrize(
        "dataset",
        [
            "tau_bench_airline_gpt4o_trial0.openai.jsonl",
            "oasst_en_100.openai.jsonl",
            "swe_agent_marshmallow_1867_fc.openai.jsonl",
        ],
    )
    async def test_real_conversations_round_trip(
        self, store: ChatStorage, layering: str, dataset: str
    ) -> None:
        for n, conversation in enumerate(load_conversations(dataset)):
            key = ChatKey("replay", f"conversation-{n}", "assistant")
            messages = [ChatMessage.from_openai(d) for d in conversation["messages"]]
            stored = await store.save_messages(key, messages)
            assert [m.id for m in stored] == [m.id for m in messages]
            fetched = await store.fetch(key)
            assert fetched == stored
            if not transforms_content(layering):
                assert [m.to_openai() for m in fetched] == conversation["messages"]
            for m in fetched:
                assert m.created_at is not None
                assert m.created_at.tzinfo is UTC
                assert "id" not in m.to_openai()


class BuiltinSuite(RealData, ConformanceSuite):
    """A built-in store: its harness comes from ``stacks.HARNESSES[name]``."""

    name: ClassVar[str]

    @pytest.fixture
    def harness(self, tmp_path: Path, request: pytest.FixtureRequest) -> StoreHarness:
        return HARNESSES[self.name][0](tmp_path, request)


class TestMemory(BuiltinSuite):
    name = "memory"


class TestSQLite(BuiltinSuite):
    name = "sqlite"


class TestOtelSQLite(BuiltinSuite):
    """The otel layer outermost over the production layering, on the default store."""

    name = "sqlite"
    layerings = ("otel::summarize::scrub",)


class TestJsonl(BuiltinSuite):
    name = "jsonl"


@pytest.mark.redis
class TestRedis(BuiltinSuite):
    name = "redis"
    backends = ("asyncio",)

    @pytest.fixture
    def server(self, redis_server_factory: Any, tmp_path: Path) -> ServerControl:
        from storage.stores.redis import RedisChatStorage

        password = "s3cret-redis-pw"
        server = redis_server_factory(tmp_path / "faulty", password=password)
        server.start()
        return ServerControl(
            open=lambda: RedisChatStorage(server.url, prefix="faults"),
            kill=server.kill,
            restart=server.start,
            password=password,
        )


@pytest.mark.redis
class TestRedisCluster(BuiltinSuite):
    name = "redis-cluster"
    backends = ("asyncio",)


@pytest.mark.postgres
class TestPostgres(BuiltinSuite):
    name = "postgres"
    backends = ("asyncio",)

    @pytest.fixture
    def server(self, postgres_server_factory: Any) -> ServerControl:
        from storage.stores.postgres import PostgresChatStorage

        password = "s3cret-pg-pw"
        server = postgres_server_factory(password=password)
        server.start()
        return ServerControl(
            open=lambda: PostgresChatStorage(
                server.dsn, schema=f"faults_{uuid.uuid4().hex[:8]}", max_size=3
            ),
            kill=server.kill,
            restart=server.start,
            password=password,
        )


class TestMirror(RealData, ConformanceSuite):
    """The ``mirror`` layer over SQLite (its secondary another SQLite file) is a store like
    any other: every rule of the kit, with the protocol and ability tests on the bare stack."""

    layerings = ("plain",)

    @pytest.fixture
    def harness(self, tmp_path: Path) -> StoreHarness:
        from storage.layers.mirroring import MirrorChatStorage
        from storage.stores.sqlite import SQLiteChatStorage

        def open_mirror(**options: Any) -> ChatStorage:
            primary = SQLiteChatStorage(tmp_path / "primary.db", **options)
            secondary = SQLiteChatStorage(tmp_path / "secondary.db", **options)
            return MirrorChatStorage(primary, secondary=secondary)

        return StoreHarness(open=open_mirror, url=None)

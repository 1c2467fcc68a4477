"""The conformance kit (``storage.testing``) over ``encrypt::`` on every base store.

The store under test is the encrypting layer over a fresh base store, with its keyring in a
SQLite file of its own; the kit then runs every rule over it and over ``scrub::encrypt::``
and ``summarize::scrub::encrypt::`` (its layerings wrap the harness's store), every ability
``find_ability`` finds (search is absent by design and its tests skip), and the multi-process
scenarios through the URL ``encrypt?create_keyring=true&keyring=...::<store URL>`` (the master
key reaches the child processes through ``CHATLAYERS_MASTER_KEYS``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from storage.layers.encrypting import DEFAULT_KEY_ENV, EncryptingChatStorage
from storage.testing import ConformanceSuite, StoreHarness, open_store
from tests.conformance.stacks import HARNESSES

# A fixed test key (32 bytes, urlsafe base64); never a real deployment's.
MASTER = "2Yv0cRzH1rWnq9cUQ5ad6mVYf3Pw0kzv3Jm1w8N0o9E="


def encrypted_harness(base: StoreHarness, keyring: Path) -> StoreHarness:
    """``base`` with the encrypting layer above it (the keyring shared by every instance)."""

    def open_encrypted(**options: Any) -> Any:
        async def wrap() -> EncryptingChatStorage:
            inner = await open_store(base.open, **options)
            return EncryptingChatStorage(inner, keys=MASTER, keyring=keyring, create_keyring=True)

        return wrap()

    url = (
        f"encrypt?create_keyring=true&keyring={keyring}::{base.url}"
        if base.url is not None
        else None
    )
    return StoreHarness(
        open=open_encrypted,
        url=url,
        persistent=base.persistent,
        clock_option=base.clock_option,
    )


class EncryptedSuite(ConformanceSuite):
    name: ClassVar[str]

    @pytest.fixture
    def harness(
        self, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
    ) -> StoreHarness:
        monkeypatch.setenv(DEFAULT_KEY_ENV, MASTER)  # for the kit's child processes
        base = HARNESSES[self.name][0](tmp_path, request)
        return encrypted_harness(base, tmp_path / "keyring" / "keys.db")


class TestEncryptedMemory(EncryptedSuite):
    name = "memory"
    backends = ("asyncio",)  # the layer has no event-loop code: trio runs over SQLite


class TestEncryptedSQLite(EncryptedSuite):
    name = "sqlite"


class TestEncryptedJsonl(EncryptedSuite):
    name = "jsonl"
    backends = ("asyncio",)


@pytest.mark.redis
class TestEncryptedRedis(EncryptedSuite):
    name = "redis"
    backends = ("asyncio",)


@pytest.mark.redis
class TestEncryptedRedisCluster(EncryptedSuite):
    name = "redis-cluster"
    backends = ("asyncio",)


@pytest.mark.postgres
class TestEncryptedPostgres(EncryptedSuite):
    name = "postgres"
    backends = ("asyncio",)

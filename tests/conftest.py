"""Shared fixtures: every async test runs on asyncio and on trio through anyio's pytest plugin."""

from __future__ import annotations

import pytest

# Throw-away redis-server / Redis Cluster / PostgreSQL fixtures (started on first use).
pytest_plugins = ["tests.servers"]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)

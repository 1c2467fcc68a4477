"""The ``store`` fixture: one fresh, empty stack per test, for every (stack, backend) pair."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.protocol import ChatStorage
from tests.conformance.stacks import STACKS, params


@pytest.fixture(params=params())
def stack_case(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def anyio_backend(stack_case: tuple[str, str]) -> str:
    return stack_case[1]


@pytest.fixture
def stack_name(stack_case: tuple[str, str]) -> str:
    return stack_case[0]


@pytest.fixture
async def store(
    stack_case: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[ChatStorage]:
    factory, _ = STACKS[stack_case[0]]
    made = factory(tmp_path, request)
    if inspect.isawaitable(made):
        made = await made
    assert isinstance(made, ChatStorage)
    try:
        yield made
    finally:
        await made.aclose()

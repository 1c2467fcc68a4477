"""``ConformanceSuite``: every test of the kit in one base class, parametrized per subclass."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, ClassVar

import pytest

from storage.protocol import ChatStorage
from storage.testing.ability_tests import AbilityTests
from storage.testing.differential_tests import DifferentialTests
from storage.testing.encryption_tests import EncryptionFaultTests
from storage.testing.fault_tests import FaultTests
from storage.testing.harness import (
    DEFAULT_LAYERINGS,
    LAYERINGS,
    ServerControl,
    StoreHarness,
    open_store,
)
from storage.testing.layer_tests import LayerPathTests
from storage.testing.paging_tests import PagingTests
from storage.testing.protocol_tests import ProtocolTests
from storage.testing.reliability_tests import ReliabilityTests
from storage.testing.replace_tests import ReplaceTests
from storage.testing.retention_tests import RetentionTests
from storage.testing.session_tests import SessionAbilityTests
from storage.testing.timetravel_tests import TimeTravelTests

__all__ = ["ConformanceSuite"]


class ConformanceSuite(
    ProtocolTests,
    AbilityTests,
    SessionAbilityTests,
    PagingTests,
    ReplaceTests,
    DifferentialTests,
    FaultTests,
    RetentionTests,
    TimeTravelTests,
    LayerPathTests,
    ReliabilityTests,
    EncryptionFaultTests,
):
    """The conformance kit: subclass it as ``TestSomething`` and give a ``harness`` fixture.

    Class attributes a subclass may set:
        backends: anyio backends to run on (default asyncio and trio; a store whose driver
            is asyncio-only sets ``("asyncio",)``).
        layerings: names of :data:`storage.testing.harness.LAYERINGS` the protocol and
            ability tests run on (default ``plain``, ``scrub``, ``summarize::scrub``; also
            ``otel::summarize::scrub``, which needs the ``otel`` extra).

    Fixtures a subclass provides:
        harness: a :class:`~storage.testing.harness.StoreHarness` (required).
        server: a :class:`~storage.testing.harness.ServerControl` for a server of the test's
            own, or ``None`` (default: the restart scenario is skipped).

    Fixtures the kit provides to its tests: ``store`` (the layering over a fresh store),
    ``base`` (the bare store), ``make_stack(**options)`` (the layering over a store opened
    with constructor options), ``opened_stores`` (closed at the end of each test).
    """

    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.anyio]
    backends: ClassVar[tuple[str, ...]] = ("asyncio", "trio")
    layerings: ClassVar[tuple[str, ...]] = DEFAULT_LAYERINGS

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize every test over the layerings it uses and the backends."""
        if "layering" in metafunc.fixturenames:
            metafunc.parametrize("layering", self.layerings)
        if "anyio_backend" in metafunc.fixturenames:
            one = getattr(metafunc.function, "_chatlayers_one_backend", False)
            metafunc.parametrize("anyio_backend", self.backends[:1] if one else self.backends)

    @pytest.fixture
    def harness(self) -> StoreHarness:
        pytest.fail(f"{type(self).__name__} must define a 'harness' fixture (a StoreHarness)")

    @pytest.fixture
    def server(self) -> ServerControl | None:
        return None

    @pytest.fixture
    async def opened_stores(self) -> AsyncIterator[list[ChatStorage]]:
        stores: list[ChatStorage] = []
        try:
            yield stores
        finally:
            for store in reversed(stores):
                await store.aclose()

    @pytest.fixture
    def make_stack(
        self, harness: StoreHarness, layering: str, opened_stores: list[ChatStorage]
    ) -> Callable[..., Awaitable[ChatStorage]]:
        async def make(**options: Any) -> ChatStorage:
            stack = LAYERINGS[layering](await open_store(harness.open, **options))
            opened_stores.append(stack)
            return stack

        return make

    @pytest.fixture
    async def store(self, make_stack: Callable[..., Awaitable[ChatStorage]]) -> ChatStorage:
        return await make_stack()

    @pytest.fixture
    async def base(self, harness: StoreHarness, opened_stores: list[ChatStorage]) -> ChatStorage:
        made = await open_store(harness.open)
        opened_stores.append(made)
        return made

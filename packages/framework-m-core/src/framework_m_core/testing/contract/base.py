"""The fixtures every area of the contract suite shares: the hook-up by URL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from ...adapters.registry import open_broker
from ...ports.capabilities import as_capabilities
from ...ports.protocols import BrokerProtocol
from ..helpers import BrokerFactory, connected
from ..namespaces import Namespace
from ..namespaces import namespace as make_namespace
from ..scenarios import Processes, processes
from .requirements import requirements_of


class ContractBase:
    """Fixtures of the contract suite. A test class provides ``broker_url``."""

    pytestmark = pytest.mark.anyio

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    def broker_url(self) -> str:
        """A URL any process on this machine can open, to a namespace fresh for each test.

        Keep the dedup window and the visibility timeout short (1 s) so that the
        tests that wait them out run.
        """
        raise pytest.UsageError(
            f"{type(self).__name__} needs a broker_url fixture returning the URL of a "
            "namespace of its own for each test (see framework_m_core.testing)"
        )

    @pytest.fixture
    async def refused_url(self, broker_url: str) -> str | None:
        """A URL of the test's queue whose schema plan the adapter must refuse (a setting
        it cannot change in place); the fixture may first make the queue so. None (the
        default) skips the test of the refusal path, saying so."""
        return None

    @pytest.fixture
    def broker_factory(self, broker_url: str) -> BrokerFactory:
        """A callable returning a new, unconnected broker for ``broker_url``.

        Override it for adapters that need Python-side options; every call must
        reach the same namespace.
        """
        return lambda: open_broker(broker_url)

    @pytest.fixture(autouse=True)
    def _requirements(
        self, request: pytest.FixtureRequest, broker_factory: BrokerFactory, broker_url: str
    ) -> None:
        """Skip, with the reason, a test whose declared requirements the adapter misses."""
        probe = broker_factory()
        as_capabilities(probe.capabilities, type(probe).__qualname__)  # unknown: an error
        for requirement in requirements_of(request.function):
            reason = requirement.unmet(probe, broker_url)
            if reason is not None:
                pytest.skip(reason)

    @pytest.fixture
    def procs(self, tmp_path: Path) -> Iterator[Processes]:
        """Processes started by the test; SIGKILLed by pid at its end."""
        with processes(tmp_path) as started:
            yield started

    @pytest.fixture
    async def broker(self, broker_factory: BrokerFactory) -> AsyncIterator[BrokerProtocol]:
        """A broker connected to the test's namespace, its schema synced."""
        async with connected(broker_factory) as b:
            yield b


def namespace_fixture(server: str) -> Any:
    """A pytest fixture giving each test a fresh :class:`Namespace` on ``server`` (through
    the adapter registered for its scheme), dropped after the test::

        namespace = namespace_fixture(os.environ.get("M_TEST_MY_URL", "my://127.0.0.1"))
    """

    @pytest.fixture
    async def namespace() -> AsyncIterator[Namespace]:
        ns = make_namespace(server)
        yield ns
        await ns.drop()

    return namespace

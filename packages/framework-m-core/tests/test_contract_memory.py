"""The contract suite against the embedded memory:// broker (one process: the
multi-process area is skipped, memory:// does not declare cross_process)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from framework_m_core.adapters.memory.testing import MemoryNamespace
from framework_m_core.testing import BrokerContract


class TestMemoryBroker(BrokerContract):
    @pytest.fixture
    async def broker_url(self) -> AsyncIterator[str]:
        namespace = MemoryNamespace("memory://")
        yield namespace.url(dedup_window=1, visibility_timeout=1)
        await namespace.drop()

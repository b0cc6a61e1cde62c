"""The contract suite against the embedded memory:// broker."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from framework_m_core.adapters.memory import MemoryBroker, reset
from framework_m_core.testing import BrokerContract


class TestMemoryBroker(BrokerContract):
    @pytest.fixture
    def broker_factory(self) -> Iterator[Callable[[], MemoryBroker]]:
        name = f"contract-{uuid.uuid4().hex}"
        yield lambda: MemoryBroker(name, dedup_window=1.0, visibility_timeout=1.0)
        reset(name)

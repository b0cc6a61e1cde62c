"""Fixtures shared by the adapter's tests: the server, and a namespace on it per test."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from framework_m_core.testing import namespace_fixture
from framework_m_nats import NatsBroker
from framework_m_nats.testing import NatsNamespace

NATS_URL = os.environ.get("M_TEST_NATS_URL", "nats://127.0.0.1:4222")

namespace = namespace_fixture(NATS_URL)


@pytest.fixture
async def broker(namespace: NatsNamespace) -> AsyncIterator[NatsBroker]:
    """A broker on the test's namespace, its schema synced."""
    async with NatsBroker.from_url(namespace.url()) as b:
        await b.sync_schema()
        yield b

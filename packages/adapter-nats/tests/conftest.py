from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from framework_m_nats.testing import NatsNamespace

NATS_URL = os.environ.get("M_TEST_NATS_URL", "nats://127.0.0.1:4222")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def namespace() -> AsyncIterator[NatsNamespace]:
    """A stream, prefix and consumer unique to the test; its streams are deleted after."""
    ns = NatsNamespace(NATS_URL)
    yield ns
    await ns.drop()

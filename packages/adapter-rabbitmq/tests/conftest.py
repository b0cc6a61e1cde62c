"""Fixtures shared by the RabbitMQ adapter's tests."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from framework_m_rabbitmq.testing import RabbitNamespace

AMQP_URL = os.environ.get("M_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def namespace() -> AsyncIterator[RabbitNamespace]:
    """An exchange and queues unique to the test; deleted after."""
    ns = RabbitNamespace(AMQP_URL)
    yield ns
    await ns.drop()

"""The contract suite against the RabbitMQ on 127.0.0.1:5672 with the deduplication plugin."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from framework_m_core.testing import BrokerContract
from framework_m_rabbitmq import RabbitBroker
from framework_m_rabbitmq.testing import delete_topology, isolated_url

from .test_dedup_plugin import AMQP_URL


class TestRabbitBroker(BrokerContract):
    @pytest.fixture
    async def broker_factory(self) -> AsyncIterator[Callable[[], RabbitBroker]]:
        tag = uuid.uuid4().hex[:12]
        url = isolated_url(AMQP_URL, tag, dedup_window=1)
        yield lambda: RabbitBroker.from_url(url)
        await delete_topology(AMQP_URL, tag)

"""The contract suite against the RabbitMQ on 127.0.0.1:5672 with the deduplication plugin."""

from __future__ import annotations

import pytest

from framework_m_core.testing import BrokerContract
from framework_m_core.testing.namespaces import with_option
from framework_m_rabbitmq.testing import RabbitNamespace


class TestRabbitBroker(BrokerContract):
    @pytest.fixture
    def broker_url(self, namespace: RabbitNamespace) -> str:
        return namespace.url(dedup_window=1)

    @pytest.fixture
    async def refused_url(self, broker_url: str) -> str:
        # The exchange's x-cache-ttl cannot change in place: another window is refused.
        return with_option(broker_url, "dedup_window", 7)

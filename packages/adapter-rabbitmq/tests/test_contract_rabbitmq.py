"""The contract suite against the RabbitMQ on 127.0.0.1:5672 with the deduplication plugin."""

from __future__ import annotations

import pytest

from framework_m_core.testing import BrokerContract
from framework_m_rabbitmq.testing import RabbitNamespace


class TestRabbitBroker(BrokerContract):
    @pytest.fixture
    def broker_url(self, namespace: RabbitNamespace) -> str:
        return namespace.url(dedup_window=1)

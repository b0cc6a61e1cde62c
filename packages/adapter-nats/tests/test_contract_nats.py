"""The contract suite against the nats-server on 127.0.0.1:4222."""

from __future__ import annotations

import pytest

from framework_m_core.testing import BrokerContract
from framework_m_nats.testing import NatsNamespace


class TestNatsBroker(BrokerContract):
    @pytest.fixture
    def broker_url(self, namespace: NatsNamespace) -> str:
        return namespace.url(dedup_window=1, max_age=60, ack_wait=1)

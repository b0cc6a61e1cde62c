"""The contract suite against the nats-server on 127.0.0.1:4222."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from framework_m_core.testing import BrokerContract
from framework_m_nats import NatsBroker


class TestNatsBroker(BrokerContract):
    @pytest.fixture
    def broker_factory(self, nats_namespace: Callable[..., str]) -> Callable[[], NatsBroker]:
        url = nats_namespace(dedup_window=1, max_age=60, ack_wait=1)
        return lambda: NatsBroker.from_url(url)

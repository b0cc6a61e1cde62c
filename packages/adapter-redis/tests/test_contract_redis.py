"""The contract suite against the redis-server on 127.0.0.1:6379."""

from __future__ import annotations

import pytest

from framework_m_core.testing import BrokerContract
from framework_m_redis.testing import RedisNamespace


class TestRedisBroker(BrokerContract):
    @pytest.fixture
    def broker_url(self, namespace: RedisNamespace) -> str:
        return namespace.url(dedup_window=1, visibility_timeout=1)

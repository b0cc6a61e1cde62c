"""The contract suite against the redis-server on 127.0.0.1:6379."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from framework_m_core.testing import BrokerContract
from framework_m_redis import RedisBroker


class TestRedisBroker(BrokerContract):
    @pytest.fixture
    def broker_factory(self, redis_namespace: Callable[..., str]) -> Callable[[], RedisBroker]:
        url = redis_namespace(dedup_window=1, visibility_timeout=1)
        return lambda: RedisBroker.from_url(url)

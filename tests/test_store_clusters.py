"""The store's contract area on the clusters the tests start: records, claims and
watches hold when the namespace lives on a Redis Cluster."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from framework_m_core.testing import StoreContract, namespace
from framework_m_core.testing.namespaces import Namespace

from .brokers import redis_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    nodes = redis_cluster(Path(tmp_path_factory.mktemp("redis-cluster")), 3)
    try:
        yield nodes[0].url
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL)


class TestStoreOnRedisCluster(StoreContract):
    @pytest.fixture
    async def cluster_namespace(self, redis_cluster_url: str) -> AsyncIterator[Namespace]:
        ns = namespace(redis_cluster_url)
        yield ns
        await ns.drop()

    @pytest.fixture
    def broker_url(self, cluster_namespace: Namespace) -> str:
        return cluster_namespace.url(cluster=1, dedup_window=1, visibility_timeout=1)

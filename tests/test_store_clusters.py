"""The store's contract area on the clusters the tests start: records, claims and
watches hold when the namespace lives on a Redis Cluster, and on a 3-node RabbitMQ
cluster one of whose nodes was killed (the records' table has a copy on every node)."""

from __future__ import annotations

import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from framework_m_core.testing import StoreContract, namespace
from framework_m_core.testing.namespaces import Namespace
from framework_m_rabbitmq.testing import RabbitNamespace

from .brokers import RabbitServer, redis_cluster

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


@pytest.fixture(scope="module")
def rabbit_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[RabbitServer]]:
    """Three nodes in one cluster, the third killed: the two left serve the tests."""
    workdir, cookie = tmp_path_factory.mktemp("rabbit-cluster"), uuid.uuid4().hex
    nodes = [
        RabbitServer(workdir, cookie=cookie, plugins=("framework_m_dedup_exchange",))
        for _ in range(3)
    ]
    try:
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda node: node.start(), nodes))
        for node in nodes[1:]:
            node.join(nodes[0])
        nodes[2].stop(signal.SIGKILL)
        yield nodes[:2]
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL)


class TestStoreOnRabbitCluster(StoreContract):
    @pytest.fixture
    async def cluster_namespace(
        self, rabbit_cluster: list[RabbitServer]
    ) -> AsyncIterator[Namespace]:
        ns = RabbitNamespace(rabbit_cluster[0].url)
        yield ns
        await ns.drop()

    @pytest.fixture
    def broker_url(self, cluster_namespace: Namespace, rabbit_cluster: list[RabbitServer]) -> str:
        first, second = (node.url.split("@")[1].rstrip("/") for node in rabbit_cluster)
        return cluster_namespace.url(dedup_window=1).replace(first, f"{first},{second}", 1)

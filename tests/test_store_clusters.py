"""The store's contract area on the clusters the tests start: records, claims and
watches hold when the namespace lives on a Redis Cluster, and on a 3-node RabbitMQ
cluster one of whose nodes was killed (the records' table has a copy on every node)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from framework_m_core.adapters.registry import open_broker
from framework_m_core.testing import StoreContract, connected, namespace
from framework_m_core.testing.namespaces import Namespace
from framework_m_rabbitmq.testing import RabbitNamespace

from .brokers import rabbit_cluster as started_rabbit_cluster
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


@pytest.fixture(scope="module")
def rabbit_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a namespace on two nodes of a 3-node cluster whose third node was
    killed. The namespace's queues are declared while all three run (a quorum queue
    declared or deleted with a member down waits on it), then one node is SIGKILLed,
    and the tests share the namespace (every store test uses keys of its own); the
    cluster goes with the module, so nothing is dropped."""
    with started_rabbit_cluster(tmp_path_factory.mktemp("rabbit-cluster")) as nodes:
        first, second = (node.url.split("@")[1].rstrip("/") for node in nodes[:2])
        url = RabbitNamespace(nodes[0].url).url(dedup_window=1)
        url = url.replace(first, f"{first},{second}", 1)

        async def declare() -> None:
            async with connected(lambda: open_broker(url)):
                pass  # connected() syncs the schema

        asyncio.run(declare())
        nodes[2].stop(signal.SIGKILL)
        yield url


class TestStoreOnRabbitCluster(StoreContract):
    @pytest.fixture
    def broker_url(self, rabbit_cluster: str) -> str:
        return rabbit_cluster

"""The store's contract area on the clusters the tests start: records, claims and
watches hold when the namespace lives on a 3-node NATS cluster (buckets with three
replicas), on a Redis Cluster, and on a 3-node RabbitMQ cluster one of whose nodes was
killed (the records' table has a copy on every node)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest

from framework_m_core.adapters.registry import open_broker
from framework_m_core.ports.store import Write
from framework_m_core.testing import StoreContract, connected, namespace
from framework_m_core.testing.namespaces import Namespace
from framework_m_nats.store import bucket_name, serializes_replicated_writes
from framework_m_rabbitmq.testing import RabbitNamespace

from .brokers import nats_cluster, redis_cluster
from .brokers import rabbit_cluster as started_rabbit_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def nats_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Three NATS servers in one cluster, once JetStream answers on it (a fresh cluster
    elects its meta leader first)."""
    nodes = nats_cluster(Path(tmp_path_factory.mktemp("nats-cluster")), 3)
    for node in nodes:
        node.start()
    url = "nats://" + ",".join(node.url.removeprefix("nats://") for node in nodes)

    async def ready() -> None:
        deadline = time.monotonic() + 60
        probe = namespace(url).url(replicas=3)
        while True:
            try:
                async with connected(lambda: open_broker(probe)):
                    return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    try:
        asyncio.run(ready())
        yield url
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL)


#: What a NATS server before 2.10 lets through on a replicated bucket (nats-server#4320:
#: it checks a write's expected revision before replicating it, so two writes expecting
#: one revision at once can both land); measured on 2.9.10 with eight writers, up to all
#: eight won.
_CONCURRENT_WRITES = {
    "test_store_of_writes_with_one_condition_at_once_exactly_one_succeeds",
    "test_store_read_modify_write_loses_no_update_across_connections",
    "test_store_claims_at_once_never_take_one_place_twice",
    "test_store_processes_claiming_and_creating_at_once_never_share_a_place",
}


class TestStoreOnNatsCluster(StoreContract):
    """A namespace of its own for each test, buckets with three replicas; the cluster
    goes with the module, so nothing is dropped."""

    @pytest.fixture(autouse=True)
    async def server_keeps_the_promise(
        self, request: pytest.FixtureRequest, nats_cluster_url: str
    ) -> None:
        if request.node.originalname not in _CONCURRENT_WRITES:
            return
        servers = nats_cluster_url.removeprefix("nats://").split(",")
        nc = await nats.connect([f"nats://{s}" for s in servers])
        try:
            serialized = serializes_replicated_writes(nc)
            version = nc.connected_server_version
        finally:
            await nc.close()
        if not serialized:
            pytest.skip(
                f"nats-server {version} lets two compare-and-set writes land at once on a "
                "replicated bucket (nats-server#4320, fixed in 2.10)"
            )

    @pytest.fixture
    def broker_url(self, nats_cluster_url: str) -> str:
        return namespace(nats_cluster_url).url(replicas=3, dedup_window=1, ack_wait=1)

    async def test_buckets_have_the_streams_replicas(self, broker_url: str) -> None:
        async with connected(lambda: open_broker(broker_url)) as broker:
            await broker.store.write([Write("k", b"v")])
            await broker.expiring_store.write([Write("k", b"v", ttl=60)])
            js = broker.js  # type: ignore[attr-defined]
            for kind in ("store", "memos"):
                info = await js.stream_info(f"KV_{bucket_name(broker.settings, kind)}")  # type: ignore[attr-defined]
                assert info.config.num_replicas == 3, kind


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

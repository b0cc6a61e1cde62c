"""Workers on a cluster the test starts run every slot once; the NATS cluster loses a node
midway. One scenario, parametrized by broker."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from framework_m_core.adapters.registry import open_broker
from framework_m_core.testing import namespace
from framework_m_core.testing.scenarios import Processes

from .brokers import ServerProcess, nats_cluster, redis_cluster
from .ride_out import replicas_ride_out

pytestmark = pytest.mark.slow

Cluster = tuple[str, dict[str, object], Callable[[], None]]


@pytest.fixture(params=["nats", "redis"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    """A cluster's URL, the options for it, and the disruption the scenario applies."""
    nodes: list[ServerProcess]
    if request.param == "nats":
        nodes = list(nats_cluster(tmp_path, 3))
        for node in nodes:
            node.start()
        servers = ",".join(node.url.removeprefix("nats://") for node in nodes)
        yield f"nats://{servers}", {"replicas": 3, "ack_wait": 2}, nodes[0].stop
    else:
        nodes = list(redis_cluster(tmp_path, 3))
        yield nodes[0].url, {"cluster": 1, "visibility_timeout": 2}, lambda: None
    for node in nodes:
        node.stop(signal.SIGKILL)


async def synced(url: str, timeout: float = 60.0) -> None:
    """Sync the schema, retrying while a fresh cluster elects its leaders."""
    deadline = time.monotonic() + timeout
    while True:
        broker = open_broker(url)
        try:
            await broker.connect()
            await broker.sync_schema()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
        finally:
            await broker.close()


def test_workers_on_a_cluster_run_every_slot_once(
    procs: Processes, tmp_path: Path, cluster: Cluster
) -> None:
    server, options, disrupt = cluster
    url = namespace(server).url(**options)
    asyncio.run(synced(url))
    replicas_ride_out(procs, url, tmp_path, disrupt)

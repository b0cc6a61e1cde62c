"""NATS servers the tests start and stop themselves: restarts and a 3-node cluster."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import nats
import pytest
from nats.js.api import RetentionPolicy, StreamConfig

from framework_m_nats import NatsBroker
from framework_m_nats.testing import isolated_url

from .brokers import NatsServer, assert_each_slot_once, nats_cluster, read_slots, wait_for_slot
from .conftest import MProcess, start_replicas, stop_replicas

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    srv = NatsServer(tmp_path)
    srv.start()
    yield srv
    srv.stop(signal.SIGKILL)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[NatsServer]]:
    nodes = nats_cluster(tmp_path, 3)
    for node in nodes:
        node.start()
    yield nodes
    for node in nodes:
        node.stop(signal.SIGKILL)


async def synced(url: str, timeout: float = 30.0) -> None:
    """Sync the schema, retrying while a fresh cluster elects its leaders."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            async with NatsBroker.from_url(url) as broker:
                await broker.sync_schema()
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


def test_dedup_survives_a_restart_inside_the_window(server: NatsServer) -> None:
    url = isolated_url(server.url, "restart")

    async def before() -> str:
        async with NatsBroker.from_url(url) as broker:
            await broker.sync_schema()
            job_id = await broker.enqueue("tick", deduplication_id="tick:tick:1700000000")
            [delivery] = await broker.receive(1, 5)
            await broker.ack(delivery)  # done and acked: a work queue would delete it now
            return job_id

    async def after() -> tuple[str, int]:
        async with NatsBroker.from_url(url) as broker:
            again = await broker.enqueue("tick", deduplication_id="tick:tick:1700000000")
            return again, broker.stats.duplicates

    job_id = asyncio.run(before())
    server.stop()
    server.start()
    assert asyncio.run(after()) == (job_id, 1)


def test_a_work_queue_stream_forgets_acked_ids_on_restart(server: NatsServer) -> None:
    """Why the job stream keeps limits retention (see framework_m_nats.schema)."""

    async def before() -> None:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(
            StreamConfig(
                name="wq",
                subjects=["wq"],
                retention=RetentionPolicy.WORK_QUEUE,
                duplicate_window=120,
            )
        )
        await js.publish("wq", b"x", headers={"Nats-Msg-Id": "slot-1"})
        sub = await js.pull_subscribe("wq", "c", stream="wq")
        [msg] = await sub.fetch(1, timeout=5)
        await msg.ack_sync()
        await nc.close()

    async def after() -> bool | None:
        nc = await nats.connect(server.url)
        ack = await nc.jetstream().publish("wq", b"x", headers={"Nats-Msg-Id": "slot-1"})
        await nc.close()
        return ack.duplicate

    asyncio.run(before())
    server.stop()
    server.start()
    assert not asyncio.run(after())


def test_workers_ride_out_a_server_restart(
    run_m: Callable[..., MProcess], tmp_path: Path, server: NatsServer
) -> None:
    log = tmp_path / "slots.log"
    url = isolated_url(server.url, uuid.uuid4().hex[:12], ack_wait=2)
    asyncio.run(synced(url))
    workers = start_replicas(run_m, url, {"FM_SLOT_LOG": str(log)}, 3)
    first = int(time.time()) + 1
    wait_for_slot(log, first + 4, timeout=15)
    server.stop()
    outage_start = time.time()
    time.sleep(3)  # the outage: shorter than the 30 s grace
    server.start()
    outage_end = time.time()
    wait_for_slot(log, int(outage_end) + 6, timeout=30)
    last = int(time.time()) - 2
    stop_replicas(workers)
    assert outage_end - outage_start >= 3
    # Slots of the outage were inside grace: their publishes were retried until the
    # server came back, so every slot ran, and none twice.
    assert_each_slot_once(read_slots(log), first, last)
    assert any(w.matches("reconnected") for w in workers)


def test_three_node_cluster_loses_a_node_and_keeps_exactly_once(
    run_m: Callable[..., MProcess], tmp_path: Path, cluster: list[NatsServer]
) -> None:
    log = tmp_path / "slots.log"
    servers = ",".join(f"127.0.0.1:{n.port}" for n in cluster)
    url = isolated_url(f"nats://{servers}", uuid.uuid4().hex[:12], replicas=3, ack_wait=2)
    asyncio.run(synced(url, timeout=60))
    workers = start_replicas(run_m, url, {"FM_SLOT_LOG": str(log)}, 3)
    first = int(time.time()) + 1
    wait_for_slot(log, first + 5, timeout=20)
    cluster[0].stop()
    wait_for_slot(log, first + 18, timeout=40)
    last = int(time.time()) - 2
    stop_replicas(workers)
    assert_each_slot_once(read_slots(log), first, last)

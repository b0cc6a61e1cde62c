"""A NATS server the tests start and restart themselves: what JetStream remembers."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.js.api import RetentionPolicy, StreamConfig

from framework_m_core import decode_message
from framework_m_nats import NatsBroker
from framework_m_nats.testing import NatsNamespace

from .brokers import NatsServer

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    srv = NatsServer(tmp_path)
    srv.start()
    yield srv
    srv.stop(signal.SIGKILL)


def test_dedup_survives_a_restart_inside_the_window(server: NatsServer) -> None:
    url = NatsNamespace(server.url).url()

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


def test_a_delayed_job_survives_a_restart_and_runs_when_due(server: NatsServer) -> None:
    """The mover has held it (a delayed nak) before the server restarts: after it, the
    job still comes, not before its time, as a first attempt."""
    url = NatsNamespace(server.url).url()

    async def before() -> tuple[str, float]:
        async with NatsBroker.from_url(url) as broker:
            await broker.sync_schema()
            due = time.time() + 3
            job_id = await broker.enqueue_at(due, "later")
            assert await broker.receive(10, 1.0) == []  # the mover holds it: not due
            return job_id, due

    async def after(due: float) -> tuple[str, int, bool]:
        async with NatsBroker.from_url(url) as broker:
            [delivery] = await broker.receive(10, 15)
            return decode_message(delivery.body).id, delivery.attempt, time.time() >= due

    job_id, due = asyncio.run(before())
    server.stop()
    server.start()
    assert asyncio.run(after(due)) == (job_id, 1, True)

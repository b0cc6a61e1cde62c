"""Workers on a server the test owns ride out its restart and a pause (SIGSTOP), each
longer than grace: every slot runs once, none is lost, and no tick held up by the fault
runs after its grace; a schedule's state outlives a restart. Parametrized by broker."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from framework_m_core.adapters.registry import open_broker
from framework_m_core.control import steering
from framework_m_core.testing import namespace
from framework_m_core.testing.scenarios import Processes

from .brokers import NatsServer, RabbitServer, RedisServer, ServerProcess
from .ride_out import GRACE, SKEW, replicas_ride_out

pytestmark = pytest.mark.slow


@pytest.fixture(params=["nats", "redis", "rabbitmq"])
def server(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[ServerProcess, dict[str, object]]]:
    """A server of the test's own and the URL options for it."""
    if request.param == "rabbitmq":
        node: RabbitServer = request.getfixturevalue("rabbit_node")
        yield node, {"management": node.management_url}
        return
    own: ServerProcess = (
        NatsServer(tmp_path) if request.param == "nats" else RedisServer(tmp_path, persist=True)
    )
    own.start()
    yield own, {"ack_wait": 2} if request.param == "nats" else {"visibility_timeout": 2}
    own.stop(signal.SIGKILL)


def test_workers_ride_out_a_restart_and_a_pause_longer_than_grace(
    procs: Processes, tmp_path: Path, server: tuple[ServerProcess, dict[str, object]]
) -> None:
    own, options = server
    ns = namespace(own.url)
    outage = GRACE + SKEW + 2  # long enough that ticks held up in it are past their grace

    def restart_then_pause() -> list[tuple[float, float]]:
        down = own.restart(outage)
        time.sleep(2)  # the workers are back (or about to be) before the next fault
        return [down, own.pause(outage)]

    try:
        replicas_ride_out(procs, ns.url(**options), tmp_path, restart_then_pause)
    finally:
        asyncio.run(ns.drop())


def test_a_schedules_state_survives_a_restart_of_the_broker(
    server: tuple[ServerProcess, dict[str, object]],
) -> None:
    """Pause, reason and latest slot are kept by a broker that persists (the Redis here
    has AOF on; NATS file storage; RabbitMQ durable queues and persistent messages)."""
    own, options = server
    ns = namespace(own.url)
    url = ns.url(**options)

    async def steer() -> steering.ScheduleState:
        async with open_broker(url) as broker:
            await broker.sync_schema()
            await steering.advance(broker, "nightly", 1_796_000_000)
            return await steering.pause(broker, "nightly", reason="restart test")

    async def read() -> steering.ScheduleState:
        async with open_broker(url) as broker:
            return await steering.read(broker, "nightly")

    try:
        before = asyncio.run(steer())
        own.restart(0.5)
        after = asyncio.run(read())
        assert after == before
        assert (after.paused, after.reason, after.latest_slot) == (
            True,
            "restart test",
            1_796_000_000,
        )
    finally:
        asyncio.run(ns.drop())

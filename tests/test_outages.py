"""Workers on a server the test owns ride out its restart: every slot runs once, none is
lost. One scenario, parametrized by broker."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from framework_m_core.testing import namespace
from framework_m_core.testing.scenarios import Processes

from .brokers import NatsServer, RabbitServer, RedisServer, ServerProcess
from .scenarios import replicas_ride_out

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


def test_workers_ride_out_a_broker_restart(
    procs: Processes, tmp_path: Path, server: tuple[ServerProcess, dict[str, object]]
) -> None:
    own, options = server
    ns = namespace(own.url)
    try:
        replicas_ride_out(procs, ns.url(**options), tmp_path, own.restart)
    finally:
        asyncio.run(ns.drop())

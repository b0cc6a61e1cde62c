"""An AMQP URL naming several hosts: a worker whose node dies moves to the next one."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path

import pytest

from framework_m_core.adapters.registry import connect
from framework_m_core.testing.scenarios import Processes, wait_for_line
from framework_m_rabbitmq.testing import RabbitNamespace

from .brokers import RabbitServer

pytestmark = pytest.mark.slow

SHARED = os.environ.get("M_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")


async def synced(url: str) -> None:
    async with connect(url, sync_schema=True):
        pass


async def enqueue(url: str) -> str:
    async with connect(url) as broker:
        return await broker.enqueue("marked")


def test_a_worker_whose_node_dies_moves_to_the_next_host_of_the_url(
    procs: Processes, tmp_path: Path
) -> None:
    own = RabbitServer(tmp_path)
    own.start()
    shared = RabbitNamespace(SHARED)
    try:
        on_shared = shared.url()
        host = SHARED.split("@", 1)[1].split("/", 1)[0]
        both = on_shared.replace(f"@{host}/", f"@127.0.0.1:{own.port},{host}/")
        on_own = on_shared.replace(f"@{host}/", f"@127.0.0.1:{own.port}/")
        for url in (on_own, on_shared):  # two brokers, not a cluster: a topology each
            asyncio.run(synced(url))
        marks = tmp_path / "marked.log"
        [worker] = procs.workers(both, 1, "--no-scheduler", env={"FM_STATUS_LOG": str(marks)})
        worker.wait_for(rf"amqp: connected to node 127\.0\.0\.1:{own.port}")
        own.stop(signal.SIGKILL)
        worker.wait_for(rf"connection to .* \(node 127\.0\.0\.1:{own.port}\) lost", timeout=30)
        worker.wait_for(rf"amqp: connected to node {re.escape(host)}", timeout=30)
        status = procs.m("status", "--broker", both)
        assert status.wait(timeout=60) == 0, status.output
        assert re.search(rf"node\s+{re.escape(host)}", status.output), status.output
        job = asyncio.run(enqueue(on_shared))
        assert wait_for_line(marks, "marked", timeout=30)[1] == job
        worker.signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
        assert "Traceback" not in worker.output
    finally:
        own.stop(signal.SIGKILL)
        asyncio.run(shared.drop())

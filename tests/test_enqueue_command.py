"""``m enqueue --in/--at`` on a real broker: the job waits in the broker until due."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from framework_m_core import connect
from framework_m_core.ports.records import QueueStats
from framework_m_core.testing import namespace

from .conftest import REPO


def m(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "framework_m_core", *args],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_enqueue_in_and_at_hold_the_job_and_a_naive_time_is_refused() -> None:
    ns = namespace("redis://127.0.0.1:6379/0")
    url = ns.url()

    async def stats(migrate: bool = False) -> QueueStats:
        async with connect(url, sync_schema=migrate) as broker:
            return await broker.queue_stats()

    try:
        asyncio.run(stats(migrate=True))
        later = m("enqueue", "report", "--in", "3600", "--broker", url)
        assert later.returncode == 0, later.stderr
        overdue = m("enqueue", "report", "--at", "2020-01-01T00:00:00Z", "--broker", url)
        assert overdue.returncode == 0, overdue.stderr
        held = asyncio.run(stats())
        assert (held.ready, held.scheduled) == (1, 1)  # the overdue one is ready at once
        naive = m("enqueue", "report", "--at", "2030-01-01T00:00", "--broker", url)
        assert naive.returncode == 2
        assert "offset" in naive.stderr
        both = m("enqueue", "report", "--in", "5", "--at", "2030-01-01T00:00Z", "--broker", url)
        assert both.returncode == 2
    finally:
        asyncio.run(ns.drop())


@pytest.mark.parametrize(
    ("server", "shown"),
    [
        ("redis://127.0.0.1:6379/0", "scheduled       1 (1 delayed, 0 retries)"),
        ("nats://127.0.0.1:4222", "scheduled       1 (delayed jobs)"),
        ("amqp://guest:guest@127.0.0.1:5672/", "scheduled       0 (delayed jobs and retries)"),
    ],
    ids=["redis", "nats", "rabbitmq"],
)
def test_m_status_counts_a_delayed_job_as_scheduled_not_as_a_retry(server: str, shown: str) -> None:
    ns = namespace(server)
    url = ns.url(**({"management": "off"} if server.startswith("amqp") else {}))
    try:
        assert m("sync-schema", "--broker", url).returncode == 0
        later = m("enqueue", "report", "--in", "3600", "--broker", url)
        assert later.returncode == 0, later.stderr
        status = m("status", "--broker", url)
        assert status.returncode == 0, status.stderr
        assert shown in status.stdout.splitlines(), status.stdout
        assert "retry-scheduled" not in status.stdout
        report = json.loads(m("status", "--broker", url, "--json").stdout)
        if server.startswith("amqp"):  # in the jobs queue until a consumer hands it on
            assert (report["ready"], report["delayed"], report["retries"]) == (1, None, None)
        else:
            assert (report["scheduled"], report["delayed"]) == (1, 1)
            assert report["retries"] in (0, None)
    finally:
        asyncio.run(ns.drop())

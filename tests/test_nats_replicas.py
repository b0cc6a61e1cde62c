"""Real `m worker` replicas on the machine's NATS, killed with real signals."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from framework_m_nats.testing import delete_streams, isolated_url, stream_messages

from .brokers import assert_each_slot_once, read_slots, wait_for_slot
from .conftest import MProcess, start_replicas, stop_replicas

pytestmark = pytest.mark.slow

NATS = "nats://127.0.0.1:4222"


@pytest.fixture
def tag() -> Iterator[str]:
    tag = uuid.uuid4().hex[:12]
    yield tag
    asyncio.run(delete_streams(NATS, tag))


def test_five_replicas_two_killed_every_slot_runs_once(
    run_m: Callable[..., MProcess], tmp_path: Path, tag: str
) -> None:
    log = tmp_path / "slots.log"
    url = isolated_url(NATS, tag, ack_wait=2)
    env = {"FM_SLOT_LOG": str(log)}
    workers = start_replicas(run_m, url, env, 5)
    first = int(time.time()) + 1
    wait_for_slot(log, first + 8, timeout=20)
    for w in workers[:2]:
        w.signal(signal.SIGKILL)
    wait_for_slot(log, first + 23, timeout=25)
    last = int(time.time()) - 2
    stop_replicas(workers[2:])
    assert_each_slot_once(read_slots(log), first, last)
    assert last - first >= 20


def test_no_scheduler_replicas_publish_no_ticks(
    run_m: Callable[..., MProcess], tmp_path: Path, tag: str
) -> None:
    url = isolated_url(NATS, tag)
    env = {"FM_SLOT_LOG": str(tmp_path / "slots.log")}
    workers = start_replicas(run_m, url, env, 3, "--no-scheduler")
    for w in workers:
        w.wait_for(r"worker starting: role=worker broker=nats://")
    time.sleep(3)  # three slot boundaries pass; a ticker would have published each
    assert asyncio.run(stream_messages(NATS, f"fmtest_{tag}")) == 0
    stop_replicas(workers)
    assert not (tmp_path / "slots.log").exists()


def test_worker_logs_its_broker_without_the_password(
    run_m: Callable[..., MProcess], tag: str
) -> None:
    url = isolated_url("nats://alice:s3cret-pw@127.0.0.1:4222", tag)
    worker = run_m("worker", "--app", "examples.heartbeat", "--broker", url)
    worker.wait_for(r"worker starting: role=ticker\+worker broker=nats://alice:\*\*\*@127")
    worker.wait_for(r"every_second slot=")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert "s3cret-pw" not in worker.output

"""Real `m worker` replicas on Redis: the machine's server, one of our own, and a cluster."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from framework_m_redis.testing import delete_queue, isolated_url

from .brokers import (
    RedisServer,
    assert_each_slot_once,
    read_slots,
    redis_cluster,
    wait_for_slot,
)
from .conftest import SLOT_APP, MProcess, start_replicas, stop_replicas
from .scenarios import killed_job_scenario

pytestmark = pytest.mark.slow

REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture
def tag() -> Iterator[str]:
    tag = uuid.uuid4().hex[:12]
    yield tag
    asyncio.run(delete_queue(REDIS, tag))


def test_five_replicas_two_killed_every_slot_once_and_the_killed_job_completes(
    run_m: Callable[..., MProcess], tmp_path: Path, tag: str
) -> None:
    workers = killed_job_scenario(run_m, tmp_path, isolated_url(REDIS, tag, visibility_timeout=2))
    assert any(w.matches("reclaimed 1 job") for w in workers)


def test_workers_ride_out_a_redis_restart(run_m: Callable[..., MProcess], tmp_path: Path) -> None:
    server = RedisServer(tmp_path, persist=True)
    server.start()
    try:
        slots = tmp_path / "slots.log"
        url = isolated_url(server.url, "restart", visibility_timeout=2)
        workers = start_replicas(run_m, url, {"FM_SLOT_LOG": str(slots)}, 3)
        first = int(time.time()) + 1
        wait_for_slot(slots, first + 4, timeout=15)
        server.stop()  # SIGTERM: the append-only file keeps the dedup keys
        time.sleep(2)  # the outage
        server.start()
        restarted = time.time()
        wait_for_slot(slots, int(restarted) + 6, timeout=30)
        last = int(time.time()) - 2
        stop_replicas(workers)
        assert_each_slot_once(read_slots(slots), first, last)
    finally:
        server.stop(signal.SIGKILL)


def test_a_redis_cluster_of_three_masters_runs_each_slot_once(
    run_m: Callable[..., MProcess], tmp_path: Path
) -> None:
    nodes = redis_cluster(tmp_path, 3)
    try:
        slots = tmp_path / "slots.log"
        url = isolated_url(nodes[0].url, uuid.uuid4().hex[:8], cluster=1, visibility_timeout=2)
        workers = start_replicas(run_m, url, {"FM_SLOT_LOG": str(slots)}, 3)
        first = int(time.time()) + 1
        wait_for_slot(slots, first + 12, timeout=25)
        last = int(time.time()) - 2
        stop_replicas(workers)
        assert_each_slot_once(read_slots(slots), first, last)
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL)


def test_an_evicting_redis_is_reported(run_m: Callable[..., MProcess], tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    server.start("--maxmemory-policy", "allkeys-lru")
    try:
        worker = run_m("worker", "--app", SLOT_APP, "--broker", server.url, "--no-scheduler")
        worker.wait_for(r"maxmemory-policy is allkeys-lru: Redis may evict dedup keys")
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    finally:
        server.stop(signal.SIGKILL)

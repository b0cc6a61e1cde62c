"""Real `m worker` replicas on Redis: the machine's server, one of our own, and a cluster."""

from __future__ import annotations

import asyncio
import signal
import subprocess
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
from .conftest import SLOT_APP, M, MProcess, start_replicas, stop_replicas

pytestmark = pytest.mark.slow

REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture
def tag() -> Iterator[str]:
    tag = uuid.uuid4().hex[:12]
    yield tag
    asyncio.run(delete_queue(REDIS, tag))


def wait_for_line(path: Path, prefix: str, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        lines = [ln.split() for ln in path.read_text().splitlines()] if path.exists() else []
        found = [ln for ln in lines if ln[0] == prefix]
        if found:
            return found[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"no {prefix!r} line in {path} within {timeout:g}s")
        time.sleep(0.1)


def test_five_replicas_two_killed_every_slot_once_and_the_killed_job_completes(
    run_m: Callable[..., MProcess], tmp_path: Path, tag: str
) -> None:
    slots, slow = tmp_path / "slots.log", tmp_path / "slow.log"
    url = isolated_url(REDIS, tag, visibility_timeout=2)
    env = {"FM_SLOT_LOG": str(slots), "FM_SLOW_LOG": str(slow)}
    workers = start_replicas(run_m, url, env, 5)
    first = int(time.time()) + 1
    enqueue = subprocess.run(
        [M, "enqueue", "slow", "--kwargs", '{"seconds": 4}', "--broker", url],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert enqueue.returncode == 0, enqueue.stderr
    job_id = enqueue.stdout.strip()
    _, started_id, pid, attempt = wait_for_line(slow, "start", timeout=10)
    assert (started_id, attempt) == (job_id, "1")
    running = next(w for w in workers if w.proc.pid == int(pid))
    running.signal(signal.SIGKILL)  # mid-job
    other = next(w for w in workers if w is not running)
    wait_for_slot(slots, first + 6, timeout=20)
    other.signal(signal.SIGKILL)
    survivors = [w for w in workers if w not in (running, other)]
    _, done_id, done_pid, done_attempt = wait_for_line(slow, "end", timeout=20)
    assert done_id == job_id
    assert int(done_pid) != int(pid)
    assert done_attempt == "2"
    wait_for_slot(slots, first + 23, timeout=25)
    last = int(time.time()) - 2
    stop_replicas(survivors)
    assert_each_slot_once(read_slots(slots), first, last)
    assert last - first >= 20
    assert any(w.matches("reclaimed 1 job") for w in survivors)


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

"""Redis that fails over: a Sentinel-managed primary and a Redis Cluster primary SIGKILLed
under three ticking replicas, one worker-only replica and a client enqueueing; and a
Redis restarted without persistence under a running worker."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from framework_m_core import BrokerError
from framework_m_core.adapters.registry import connect, open_broker
from framework_m_core.runtime.worker import FETCH_BACKOFF_MAX
from framework_m_core.testing import namespace
from framework_m_core.testing.scenarios import (
    Processes,
    assert_each_slot_once,
    slot_runs,
    stop_all,
    wait_for_line,
    wait_for_slot,
    wait_ticking,
)

from .brokers import RedisServer, SentinelSet, redis_cli, redis_cluster

pytestmark = pytest.mark.slow

GRACE, SKEW = 2.0, 0.5


class Enqueuer:
    """Enqueues ``marked`` jobs from a thread of its own until stopped; keeps the ids
    of the enqueues that returned (acknowledged) and counts the ones that raised."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.acked: list[str] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def __enter__(self) -> Enqueuer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    async def _run(self) -> None:
        broker = open_broker(self.url)
        await broker.connect()
        try:
            while not self._stop.is_set():
                try:
                    self.acked.append(await broker.enqueue("marked"))
                except Exception:
                    self.errors += 1
                await asyncio.sleep(0.05)
        finally:
            await broker.close()


def marked_runs(path: Path) -> Counter[tuple[str, int]]:
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter((w[1], int(w[3])) for w in (ln.split() for ln in lines) if w[0] == "marked")


def wait_all_ran(path: Path, ids: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        ran = {job for job, _ in marked_runs(path)}
        lost = [job for job in ids if job not in ran]
        if not lost:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(lost)} of {len(ids)} acknowledged jobs never ran: {lost}")
        time.sleep(0.2)


def fail_over_under_load(
    procs: Processes,
    url: str,
    tmp_path: Path,
    kill: Callable[[], None],
    settle: Callable[[], float | None],
) -> None:
    """Three ticking replicas, one worker-only replica and a client enqueueing ``marked``
    jobs; ``kill`` SIGKILLs the primary a third of the way through, ``settle`` returns once
    a replica took over (with when it did, if that was not just now). Every slot runs once
    (those due during the failover coalesce into the latest, as the grace rule says), no
    slot is enqueued twice, and every enqueue that returned ran."""
    slots, marks = tmp_path / "slots.log", tmp_path / "marked.log"
    env = {"FM_SLOT_LOG": str(slots), "FM_STATUS_LOG": str(marks)}
    args = ("--grace", str(GRACE), "--clock-skew", str(SKEW))
    workers = procs.workers(url, 3, *args, env=env)
    workers += procs.workers(url, 1, "--no-scheduler", env=env)
    wait_ticking(workers[:3])
    first = int(time.time()) + 1
    with Enqueuer(url) as enqueuer:
        wait_for_slot(slots, first + 4, timeout=30)
        killed = time.time()
        kill()
        back = settle() or time.time()
        wait_for_slot(slots, int(back) + 8, timeout=60)
    last = int(time.time()) - 2
    assert len(enqueuer.acked) > 50, (len(enqueuer.acked), enqueuer.errors)
    wait_all_ran(marks, enqueuer.acked, timeout=30)
    stop_all(workers)
    twice = [job for (job, attempt), n in marked_runs(marks).items() if n > 1]
    assert not twice, f"jobs enqueued once but run twice at the same attempt: {twice}"
    reach = GRACE + SKEW + FETCH_BACKOFF_MAX + 1
    assert_each_slot_once(
        slot_runs(slots),
        first,
        last,
        redelivery=[(killed - reach, back + 1)],
        outage=(killed - 1, back + 4),
        workers=workers,
        context=f"killed {killed:.3f}, settled {back:.3f}",
    )
    assert "Traceback" not in "".join(w.output for w in workers)


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelSet]:
    servers = SentinelSet(tmp_path)
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()


def test_a_sentinel_failover_loses_and_repeats_no_slot_and_no_job(
    procs: Processes, tmp_path: Path, sentinels: SentinelSet
) -> None:
    url = namespace(sentinels.url()).url(visibility_timeout=2)
    old = sentinels.primary_port()

    def settle() -> float:
        return sentinels.wait_for(lambda role: role[1] != old, timeout=60, replicas=1, steady=3)

    fail_over_under_load(
        procs, url, tmp_path, lambda: sentinels.primary.stop(signal.SIGKILL), settle
    )


def test_a_cluster_primary_failover_loses_and_repeats_no_slot_and_no_job(
    procs: Processes, tmp_path: Path
) -> None:
    nodes = redis_cluster(tmp_path, 3, 2, "--cluster-node-timeout", "1500")
    try:
        url = namespace(nodes[0].url).url(cluster=1, visibility_timeout=2, wait_replicas=1)
        queue = url.split("queue=")[1].split("&")[0]
        slot = int(redis_cli(nodes[0].port, "cluster", "keyslot", f"fm:{{{queue}}}:jobs"))
        owner = next(n for n in nodes if _owns(n.port, slot))
        # Every node a seed, the one to be killed first: a process started after the
        # kill finds the cluster through the next.
        seeds = ",".join(f"127.0.0.1:{n.port}" for n in [owner, *(n for n in nodes if n != owner)])
        url = url.replace(f"127.0.0.1:{nodes[0].port}", seeds)

        def settle() -> None:
            deadline = time.monotonic() + 60
            while not any(_owns(n.port, slot) for n in nodes if n is not owner):
                assert time.monotonic() < deadline, "no replica took over the queue's slot"
                time.sleep(0.2)
            status = procs.m("status", "--broker", url)
            assert status.wait(timeout=60) == 0, status.output

        fail_over_under_load(procs, url, tmp_path, lambda: owner.stop(signal.SIGKILL), settle)
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL)


def _replication(port: int) -> str:
    return redis_cli(port, "info", "replication")


def _owns(port: int, slot: int) -> bool:
    """Whether the node on ``port`` is a primary serving ``slot`` (by its own view)."""
    if redis_cli(port, "ping").strip() != "PONG":
        return False
    for line in redis_cli(port, "cluster", "nodes").splitlines():
        words = line.split()
        if "myself" in words[2] and "master" in words[2]:
            for spec in words[8:]:
                low, _, high = spec.partition("-")
                if low.isdigit() and int(low) <= slot <= int(high or low):
                    return True
    return False


def test_a_worker_syncs_the_schema_again_after_a_restart_without_persistence(
    procs: Processes, tmp_path: Path
) -> None:
    server = RedisServer(tmp_path)
    server.start()
    try:
        url = namespace(server.url).url()
        marks = tmp_path / "marked.log"
        env = {"FM_STATUS_LOG": str(marks)}
        [worker] = procs.workers(url, 1, "--no-scheduler", env=env)
        [strict] = procs.workers(url, 1, "--no-scheduler", "--no-sync-schema", env=env)
        # Paused until the strict worker has met the empty server: a sync by the other
        # one first would hide the gone schema from it.
        worker.signal(signal.SIGSTOP)
        try:
            server.stop(signal.SIGKILL)
            server.start()  # empty: no group, no layout marker
            strict.wait_for(
                r"--no-sync-schema forbids creating it: run `m sync-schema`", timeout=30
            )
        finally:
            worker.signal(signal.SIGCONT)
        worker.wait_for(r"the broker's schema is gone .*: syncing it again", timeout=30)
        worker.wait_for(r"schema synced again: ", timeout=30)

        async def enqueue() -> str:
            async with connect(url) as broker:
                return await broker.enqueue("marked")

        job = asyncio.run(enqueue())
        wait_for_line(marks, "marked", timeout=30)
        assert job in marks.read_text()
        stop_all([worker, strict])
    finally:
        server.stop(signal.SIGKILL)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[RedisServer]]:
    nodes = redis_cluster(tmp_path, 3, 2, "--cluster-node-timeout", "1500")
    try:
        yield nodes
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL)


async def eventually(enqueue: Callable[[str], Awaitable[str]], dedup: str) -> str:
    """An enqueue retried, as the ticker does, until a replica acknowledged it in time
    (0.3 s is short for a replica just resumed on a loaded machine)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            return await enqueue(dedup)
        except BrokerError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


@pytest.mark.parametrize("shape", ["sentinel", "cluster"])
def test_a_write_no_replica_acknowledged_in_time_is_an_error_until_one_has_it(
    request: pytest.FixtureRequest, shape: str
) -> None:
    if shape == "sentinel":
        sentinels: SentinelSet = request.getfixturevalue("sentinels")
        url = namespace(sentinels.url()).url(wait_timeout=0.3)
        replicas: list[RedisServer] = sentinels.replicas
    else:
        nodes: list[RedisServer] = request.getfixturevalue("cluster")
        # A queue whose primary is not the cluster client's default node (the one that
        # serves slot 0): a WAIT sent there instead of to the queue's primary must not pass.
        while True:
            url = namespace(nodes[0].url).url(cluster=1, wait_timeout=0.3, wait_replicas=1)
            queue = url.split("queue=")[1].split("&")[0]
            slot = int(redis_cli(nodes[0].port, "cluster", "keyslot", f"fm:{{{queue}}}:jobs"))
            owner = next(n for n in nodes if _owns(n.port, slot))
            if not _owns(owner.port, 0):
                break
        other = next(n for n in nodes if n is not owner and "role:master" in _replication(n.port))
        url = url.replace(f"127.0.0.1:{nodes[0].port}/", f"127.0.0.1:{other.port}/")
        replicas = [n for n in nodes if f"master_port:{owner.port}" in _replication(n.port)]
        deadline = time.monotonic() + 30
        while "state=online" not in _replication(owner.port):
            assert time.monotonic() < deadline, "the queue's primary has no replica in sync"
            time.sleep(0.1)

    async def enqueue(dedup: str) -> str:
        async with connect(url) as broker:  # a connection of its own: WAIT is per connection
            return await broker.enqueue("marked", deduplication_id=dedup)

    async def scenario() -> None:
        await eventually(enqueue, "before")  # the replicas answer: it counts
        for replica in replicas:
            replica._signal(signal.SIGSTOP)
        try:
            for _ in range(2):  # the first stores it; the second finds it, still uncopied
                with pytest.raises(BrokerError, match=r"copied to 0 of 1 replica\(s\) within"):
                    await enqueue("during")
        finally:
            for replica in replicas:
                replica._signal(signal.SIGCONT)
        job = await eventually(enqueue, "during")  # the same dedup id: stored once, now copied
        assert await enqueue("during") == job

    asyncio.run(scenario())

"""The blocking client as web servers use it: many threads at once, a child forked after
it connected, and a process exiting while its threads still enqueue; real ``m worker``
processes run what they enqueued."""

from __future__ import annotations

import asyncio
import faulthandler
import multiprocessing
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from framework_m_core import connect_sync
from framework_m_core.blocking import SyncClient
from framework_m_core.testing import namespace
from framework_m_core.testing.scenarios import Processes, stop_all

pytestmark = pytest.mark.processes

SERVERS = ["redis://127.0.0.1:6379/0", "nats://127.0.0.1:4222"]
THREADS = 16
EACH = 25


def _ran(status: Path) -> Counter[str]:
    """How many times each ``marked`` job ran, by the recorder's status log."""
    lines = status.read_text().splitlines() if status.exists() else []
    return Counter(line.split()[1] for line in lines if line.startswith("marked "))


def _enqueue_in_child(client: SyncClient, out: str) -> None:
    faulthandler.dump_traceback_later(30, exit=True)  # a hang shows where, then fails
    ids = [client.enqueue("marked") for _ in range(10)]
    assert client._local.link.pid == os.getpid()  # its own connection, not the parent's
    Path(out).write_text("\n".join(ids))


@pytest.mark.parametrize("server", SERVERS, ids=["redis", "nats"])
def test_jobs_enqueued_from_16_threads_and_a_forked_child_each_run_once(
    procs: Processes, server: str, tmp_path: Path
) -> None:
    ns = namespace(server)
    status = tmp_path / "status.log"
    try:
        with connect_sync(ns.url(), sync_schema=True) as client:
            first = client.enqueue("marked")  # connected and used before the fork
            ids: list[list[str]] = [[] for _ in range(THREADS)]
            start = threading.Barrier(THREADS)

            def enqueue(n: int) -> None:
                start.wait()
                ids[n] = [client.enqueue("marked") for _ in range(EACH)]

            threads = [threading.Thread(target=enqueue, args=(n,)) for n in range(THREADS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            # Forked as a preloading server forks: after the client connected, here with
            # 17 connections of the parent's threads, and with the client's lock held
            # by another thread at that moment (a stdio lock held by a running thread
            # would hang any child, whatever the client did: none runs at the fork).
            held, release = threading.Event(), threading.Event()

            def hold() -> None:
                with client._lock:
                    held.set()
                    release.wait(60)

            holder = threading.Thread(target=hold)
            holder.start()
            assert held.wait(10)
            child_ids = tmp_path / "child.ids"
            child = multiprocessing.get_context("fork").Process(
                target=_enqueue_in_child, args=(client, str(child_ids))
            )
            child.start()
            child.join(60)
            release.set()
            holder.join(10)
            assert child.exitcode == 0
            assert client.enqueue("marked")  # the parent's connection still works
            from_child = child_ids.read_text().split()
        enqueued = {first, *from_child, *(i for batch in ids for i in batch)}
        assert len(enqueued) == 1 + 10 + THREADS * EACH
        workers = procs.workers(ns.url(), 2, env={"FM_STATUS_LOG": str(status)})
        deadline = time.monotonic() + 60
        while not set(_ran(status)) >= enqueued:  # a poll with a deadline
            assert time.monotonic() < deadline, f"{len(enqueued - set(_ran(status)))} never ran"
            time.sleep(0.2)
        stop_all(workers)
        ran = _ran(status)
        assert [i for i in enqueued if ran[i] != 1] == []
    finally:
        asyncio.run(ns.drop())


EXITING = """
import sys, threading
from framework_m_core import connect_sync

client = connect_sync(sys.argv[1])
out = open(sys.argv[2], "w")
lock = threading.Lock()

def enqueue():
    for _ in range(40):
        job_id = client.enqueue("marked")
        with lock:
            out.write(job_id + "\\n")
            out.flush()

for _ in range(8):
    threading.Thread(target=enqueue).start()
print("started", flush=True)
"""


def test_a_process_that_exits_while_its_threads_enqueue_stores_every_job_it_was_told_of(
    tmp_path: Path,
) -> None:
    ns = namespace(SERVERS[0])
    told = tmp_path / "ids"
    try:
        with connect_sync(ns.url(), sync_schema=True):
            pass
        done = subprocess.run(
            [sys.executable, "-c", EXITING, ns.url(), str(told)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "still under way" not in done.stderr, done.stderr
        ids = told.read_text().split()
        assert len(ids) == 8 * 40
        with connect_sync(ns.url()) as client:
            states = Counter(str(client.status(i).state) for i in ids)
        assert states == {"queued": 8 * 40}
    finally:
        asyncio.run(ns.drop())

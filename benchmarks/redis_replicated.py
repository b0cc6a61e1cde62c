"""What ``wait_replicas`` costs on Redis: the same enqueues and drain with and without
``WAIT`` for one replica, side by side, on a primary and a replica of its own.

    hatch run bench:python benchmarks/redis_replicated.py [-n 5000]

It starts ``redis-server`` twice on free loopback ports (a primary and a replica of it,
without persistence) and stops both by pid when done.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the modules beside this file
from common import in_batches, sends_per_second
from run import fresh, noop_app, running

from framework_m_core import Worker
from framework_m_core.testing.namespaces import with_options

REDIS_SERVER = os.environ.get("M_TEST_REDIS_SERVER", "redis-server")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def primary_and_replica() -> Iterator[int]:
    """A primary with one replica in sync; yields the primary's port."""
    workdir = Path(tempfile.mkdtemp(prefix="fm-bench-redis-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ports = [_free_port(), _free_port()]
        for i, port in enumerate(ports):
            args = [REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(port), "--save", ""]
            args += ["--appendonly", "no", "--dir", str(workdir)]
            args += ["--repl-diskless-sync-delay", "0", "--dbfilename", f"dump-{port}.rdb"]
            if i:
                args += ["--replicaof", "127.0.0.1", str(ports[0])]
            procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL))
        deadline = time.monotonic() + 30
        while "state=online" not in _replication(ports[0]):
            if time.monotonic() > deadline:
                raise RuntimeError("the replica did not come in sync within 30 s")
            time.sleep(0.1)
        yield ports[0]
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


def _replication(port: int) -> str:
    return subprocess.run(
        ["redis-cli", "-p", str(port), "info", "replication"],
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout


async def enqueue_rate(url: str, n: int, inflight: int) -> float:
    async with fresh(url) as broker:
        run = uuid.uuid4().hex
        return await sends_per_second(
            lambda i: broker.enqueue("noop", deduplication_id=f"{run}:{i}", i=i), n, inflight
        )


async def drain_rate(url: str, n: int) -> float:
    app, done = noop_app(n)
    async with fresh(url) as broker:
        await in_batches(lambda i: broker.enqueue("noop", i=i), n)
        worker = Worker(app, broker, fetch_timeout=0.1)
        await worker.prepare()
        started = time.perf_counter()
        async with running(worker):
            await done.wait()
        return n / (time.perf_counter() - started)


async def measure(port: int, n: int) -> None:
    base = f"redis://127.0.0.1:{port}/0"
    rows = [
        ("enqueue one by one, dedup id", lambda u: enqueue_rate(u, n // 5, 1)),
        ("enqueue, 100 in flight", lambda u: enqueue_rate(u, n, 100)),
        ("drain, defaults", lambda u: drain_rate(u, n)),
    ]
    print(f"{'':32} {'wait_replicas=0':>16} {'wait_replicas=1':>16} {'ratio':>7}")
    for label, run in rows:
        plain = await run(with_options(base, wait_replicas=0))
        waited = await run(with_options(base, wait_replicas=1))
        print(f"{label:32} {plain:>14,.0f}/s {waited:>14,.0f}/s {waited / plain:>7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5_000)
    args = parser.parse_args()
    with primary_and_replica() as port:
        asyncio.run(measure(port, args.n))


if __name__ == "__main__":
    main()

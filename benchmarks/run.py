"""framework-m benchmarks: prints numbers and ratios side by side in one run.

    hatch run bench                      # memory://
    hatch run bench --broker nats://...  # add any installed adapter beside it
    hatch run bench --quick              # a tiny smoke run

Measured per broker:
  enqueue         awaited one by one, without and with deduplication ids
  enqueue (x100)  100 enqueues in flight at once, with deduplication ids
  drain           a worker (concurrency 50) running no-op jobs to empty
  ticker idle     CPU used by idle tickers (10 schedules, none due), per replica
  ticker 1s       CPU used per replica by 10 replicas ticking a 1-second schedule

Ratios compare with the first row of the same measurement, so they hold on a
noisy, shared machine where absolute numbers do not. Peer libraries are added
as further rows by functions in ``PEERS`` (none yet for memory://).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from framework_m_core import App, InProcessTickerAdapter, JobContext, Worker
from framework_m_core.adapters.registry import open_broker
from framework_m_core.protocols import BrokerProtocol


@dataclass
class Row:
    measurement: str
    subject: str
    value: float
    unit: str


def isolated(url: str) -> str:
    """A fresh namespace for each measurement where the adapter supports one."""
    if url.startswith("memory://"):
        return f"memory://bench-{uuid.uuid4().hex}"
    return url


async def connected(url: str) -> BrokerProtocol:
    broker = open_broker(isolated(url))
    await broker.connect()
    await broker.sync_schema()
    return broker


async def drain_queue(broker: BrokerProtocol) -> None:
    while batch := await broker.receive(500, 0.2):
        for d in batch:
            await broker.ack(d)


async def bench_enqueue(url: str, n: int, dedup: bool) -> float:
    broker = await connected(url)
    try:
        run = uuid.uuid4().hex
        t0 = time.perf_counter()
        for i in range(n):
            await broker.enqueue("noop", f"{run}:{i}" if dedup else None, i=i)
        elapsed = time.perf_counter() - t0
        await drain_queue(broker)
        return n / elapsed
    finally:
        await broker.close()


async def bench_enqueue_concurrent(url: str, n: int, inflight: int = 100) -> float:
    broker = await connected(url)
    try:
        run = uuid.uuid4().hex
        sem = asyncio.Semaphore(inflight)

        async def one(i: int) -> None:
            async with sem:
                await broker.enqueue("noop", f"{run}:{i}", i=i)

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(n)))
        elapsed = time.perf_counter() - t0
        await drain_queue(broker)
        return n / elapsed
    finally:
        await broker.close()


async def bench_drain(url: str, n: int) -> float:
    broker = await connected(url)
    app = App()

    done = asyncio.Event()
    ran = 0

    @app.job
    async def noop(ctx: JobContext, i: int) -> None:
        nonlocal ran
        ran += 1
        if ran == n:
            done.set()

    try:
        await asyncio.gather(*(broker.enqueue("noop", i=i) for i in range(n)))
        worker = Worker(app, broker, concurrency=50, fetch_timeout=0.1)
        t0 = time.perf_counter()
        task = asyncio.create_task(worker.run())
        await done.wait()
        elapsed = time.perf_counter() - t0
        worker.stop()
        await task
        return n / elapsed
    finally:
        await broker.close()


async def bench_ticker_cpu(url: str, replicas: int, seconds: float, busy: bool) -> float:
    """CPU seconds per replica per wall second, in percent."""
    app = App()
    if busy:

        @app.job(every=1)
        async def tick(ctx: JobContext) -> None: ...

    else:
        for i in range(10):
            app.job(name=f"yearly_{i}", schedule=f"{i} 0 1 1 *")(_noop)
    first = await connected(url)
    brokers = [first]
    for _ in range(replicas - 1):
        b = open_broker(first.display_url if url.startswith("memory://") else url)
        await b.connect()
        brokers.append(b)
    tickers = [InProcessTickerAdapter(app.jobs.values(), b, clock_skew=1.0) for b in brokers]
    tasks = [asyncio.create_task(t.run()) for t in tickers]
    await asyncio.sleep(0.5)  # start-up (first slot computations) is not steady state
    c0, t0 = time.process_time(), time.perf_counter()
    await asyncio.sleep(seconds)
    for t in tickers:
        t.stop()
    await asyncio.gather(*tasks)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    await drain_queue(first)
    for b in brokers:
        await b.close()
    return 100 * cpu / wall / replicas


async def _noop(ctx: JobContext) -> None: ...


# Further rows: name -> async function(n) returning jobs/s, for peer libraries.
PEERS: dict[str, dict[str, Callable[[int], Awaitable[float]]]] = {}


async def run(urls: list[str], n: int, ticker_seconds: float) -> list[Row]:
    rows: list[Row] = []
    for url in urls:
        label = url.split("?")[0]
        rows.append(
            Row("enqueue", f"{label} no dedup id", await bench_enqueue(url, n, False), "/s")
        )
        rows.append(Row("enqueue", f"{label} dedup id", await bench_enqueue(url, n, True), "/s"))
        rows.append(
            Row(
                "enqueue x100 in flight",
                f"{label} dedup id",
                await bench_enqueue_concurrent(url, n),
                "/s",
            )
        )
        rows.append(Row("drain no-op jobs", label, await bench_drain(url, n), "/s"))
        rows.append(
            Row(
                "ticker CPU, idle",
                f"{label} per replica",
                await bench_ticker_cpu(url, 10, ticker_seconds, busy=False),
                "% CPU",
            )
        )
        rows.append(
            Row(
                "ticker CPU, 1s schedule",
                f"{label} per replica (10 replicas)",
                await bench_ticker_cpu(url, 10, ticker_seconds, busy=True),
                "% CPU",
            )
        )
    for measurement, peers in PEERS.items():
        for name, fn in peers.items():
            rows.append(Row(measurement, name, await fn(n), "/s"))
    return rows


def print_table(rows: list[Row]) -> None:
    first: dict[str, float] = {}
    print(f"{'measurement':<26} {'subject':<42} {'value':>14}  ratio")
    for row in rows:
        base = first.setdefault(row.measurement, row.value)
        ratio = row.value / base if base else float("nan")
        value = f"{row.value:,.0f} {row.unit}" if row.unit == "/s" else f"{row.value:.3f}{row.unit}"
        print(f"{row.measurement:<26} {row.subject:<42} {value:>14}  {ratio:5.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", action="append", default=[], help="add a broker URL")
    parser.add_argument("-n", type=int, default=20_000, help="jobs per measurement")
    parser.add_argument("--ticker-seconds", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    n, secs = (200, 1.2) if args.quick else (args.n, args.ticker_seconds)
    rows = asyncio.run(run(["memory://", *args.broker], n, secs))
    print_table(rows)


if __name__ == "__main__":
    main()

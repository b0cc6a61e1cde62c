"""framework-m benchmarks: prints numbers and ratios side by side in one run.

    hatch run bench:run                                 # memory://
    hatch run bench:run --broker nats://127.0.0.1:4222  # add an installed adapter
    hatch run bench:run --quick                         # a tiny smoke run
    hatch run bench:run --only drain --only batch       # some measurements only
    hatch run bench:run --only concurrency              # the drain at concurrency 1..200

Measured per broker:
  enqueue one by one      awaited one at a time; the raw client's ceiling first
                          where one is known, then framework-m without and with
                          deduplication ids, and the blocking client (connect_sync)
                          from a thread; a fifth of -n jobs (each waits out a
                          round trip, so fewer give the same median)
  enqueue, 100 in flight  the same with 100 enqueues outstanding
  enqueue a batch         enqueue_many by 500, beside the raw client's batch ceiling
  drain no-op jobs        the broker's own client consuming and acking one by one
                          (the consume ceiling), a worker at its defaults emptying
                          a queue (keeping each job's status, the default), keeping
                          none (keep_result=0), with metrics on, with a fleet-wide limit on the
                          job (concurrency=50: a lease per run, nobody waits), with
                          a rate on it (rate_limit=1000/s per i: a start logged per
                          run, nobody waits), unique per i (a key per run), then
                          peers (50 tasks at once)
  latency, idle worker    enqueue -> handler start, one job at a time (--samples),
                          p50 and p99 rows, framework-m at its defaults, then peers
  ticker CPU, idle        idle tickers (10 schedules, none due), per replica
  ticker CPU, 1s schedule 10 replicas ticking a 1-second schedule, per replica
  concurrency sweep       (only when --only names it) the drain at concurrency 1 to 200

Each throughput is the median of --rounds runs that alternate between the rows
of a measurement. Ratios compare with the first row of the same measurement,
so they hold on a noisy, shared machine where absolute numbers do not. Raw ceilings and peer
libraries (``ceilings()``, ``peers()``) are added per URL scheme; peers are
installed in the ``bench`` environment only.

The run always finishes: one run of a subject that takes longer than --deadline
seconds (300), or raises, fails that subject's row with the reason and the run
goes on. Each measurement's rows print as soon as it is done, all rows again at
the end with the run's duration; Ctrl-C stops it at once, printing what it has.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from framework_m_core import (
    App,
    BaseBroker,
    BatchJob,
    JobContext,
    JobHandle,
    Ticker,
    Worker,
    connect_sync,
)
from framework_m_core.adapters.registry import open_broker
from framework_m_core.jobs import DEFAULT_KEEP
from framework_m_core.observability.metrics import Metrics
from framework_m_core.ports.protocols import BrokerProtocol
from framework_m_core.ports.urls import redact_url
from framework_m_core.runtime.worker import DEFAULT_CONCURRENCY
from framework_m_core.testing.namespaces import namespace

sys.path.insert(0, str(Path(__file__).parent))  # the modules beside this file
from common import StartMark, in_batches, latencies, sends_per_second


@dataclass
class Row:
    measurement: str
    subject: str
    value: float
    unit: str
    error: str | None = None  # why the subject gave no number (it hung, failed, stopped short)


# What each measurement left on a shared broker, removed at the end of the run.
CLEANUPS: list[Callable[[], Awaitable[None]]] = []


@contextlib.asynccontextmanager
async def isolated(url: str) -> AsyncIterator[str]:
    """The URL of a fresh namespace, dropped as soon as the block ends (a RabbitMQ node
    holds file handles for every queue it keeps) or, if that fails, at the end of the run."""
    server, _, query = url.partition("?")
    ns = namespace(server)
    CLEANUPS.append(ns.drop)
    yield ns.url(**dict(parse_qsl(query)))
    await ns.drop()
    CLEANUPS.remove(ns.drop)


@contextlib.asynccontextmanager
async def fresh(url: str) -> AsyncIterator[BrokerProtocol]:
    """A connected broker with its schema, on a namespace of its own."""
    async with isolated(url) as ns_url:
        broker = open_broker(ns_url)
        try:
            await broker.connect()
            await broker.sync_schema()
            yield broker
        finally:
            await broker.close()


async def bench_enqueue(url: str, n: int, dedup: bool) -> float:
    async with fresh(url) as broker:
        run = uuid.uuid4().hex
        t0 = time.perf_counter()
        for i in range(n):
            await broker.enqueue("noop", f"{run}:{i}" if dedup else None, i=i)
        return n / (time.perf_counter() - t0)


async def bench_enqueue_sync(url: str, n: int) -> float:
    """The blocking client's enqueue (``connect_sync``), one at a time from a thread of
    plain ``def`` code, as ``bench_enqueue`` without dedup ids awaits them."""
    async with isolated(url) as ns_url:

        def run() -> float:
            with connect_sync(ns_url, sync_schema=True) as client:
                client.enqueue("noop", i=-1)  # connected and warm
                t0 = time.perf_counter()
                for i in range(n):
                    client.enqueue("noop", i=i)
                return n / (time.perf_counter() - t0)

        return await asyncio.to_thread(run)


async def bench_enqueue_many(url: str, n: int, batch: int = 500) -> float:
    """``enqueue_many`` in batches of ``batch`` jobs, each with a dedup id."""
    async with fresh(url) as broker:
        run = uuid.uuid4().hex
        jobs = [BatchJob("noop", {"i": i}, f"{run}:{i}") for i in range(n)]
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            await broker.enqueue_many(jobs[start : start + batch])
        return n / (time.perf_counter() - t0)


async def bench_enqueue_concurrent(url: str, n: int, inflight: int = 100) -> float:
    async with fresh(url) as broker:
        run = uuid.uuid4().hex
        return await sends_per_second(
            lambda i: broker.enqueue("noop", f"{run}:{i}", i=i), n, inflight
        )


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[None]:
    """``worker`` running while the block runs; stopped (or, cut short, aborted) after."""
    task = asyncio.create_task(worker.run())
    try:
        yield
    except BaseException:
        worker.abort()
        raise
    finally:
        worker.stop()
        await asyncio.gather(task, return_exceptions=True)


def noop_app(
    n: int,
    limit: int | None = None,
    keep: float = DEFAULT_KEEP,
    rate: str | None = None,
    unique: bool = False,
) -> tuple[App, asyncio.Event]:
    """An app whose one job, ``noop(i)``, does nothing (with ``concurrency=limit`` when
    given, keeping its status for ``keep`` seconds, with ``rate_limit=rate`` per ``i``
    when given, unique per ``i`` with ``unique``); the event is set once it ran ``n``
    times."""
    app = App()
    done = asyncio.Event()
    ran = 0

    @app.job(
        concurrency=limit,
        keep_result=keep,
        rate_limit=rate,
        rate_key=None if rate is None else "i",
        unique=unique,
    )
    async def noop(ctx: JobContext, i: int) -> None:
        nonlocal ran
        ran += 1
        if ran == n:
            done.set()

    return app, done


async def fill(broker: BrokerProtocol, n: int, keep: float = DEFAULT_KEEP) -> None:
    """Enqueue ``n`` no-op jobs by name; ``keep=0``: keeping no status (as through
    its handle), so that nothing is written for them."""
    if keep == 0:
        assert isinstance(broker, BaseBroker)
        await in_batches(lambda i: broker.enqueue_job("noop", None, {"i": i}, keep=0), n)
    else:
        await in_batches(lambda i: broker.enqueue("noop", i=i), n)


async def bench_drain(
    url: str,
    n: int,
    metrics: bool = False,
    concurrency: int | None = None,
    limit: int | None = None,
    keep: float = DEFAULT_KEEP,
    rate: str | None = None,
    unique: bool = False,
) -> float:
    """A worker emptying a queue of ``n`` no-op jobs; at its default concurrency unless
    ``concurrency`` is given; the job with ``concurrency=limit`` when given (a lease
    taken and released by every run); ``keep=0``: enqueued keeping no status (as
    through its handle), so that nothing is written; ``rate``: the job with that
    ``rate_limit`` per ``i`` (a start logged by every run, none waits); ``unique``: the
    job unique per ``i``, enqueued through its handle (a key taken and given back by
    every run)."""
    app, done = noop_app(n, limit, keep, rate, unique)
    async with fresh(url) as broker:
        if unique:
            handle = JobHandle(app.jobs["noop"], app.jobs["noop"].handler)
            await in_batches(lambda i: handle.enqueue(broker, i=i), n)
        else:
            await fill(broker, n, keep)
        concurrency = concurrency or DEFAULT_CONCURRENCY
        observer = Metrics(concurrency) if metrics else None
        worker = Worker(app, broker, concurrency=concurrency, fetch_timeout=0.1, observer=observer)
        t0 = time.perf_counter()
        async with running(worker):
            await done.wait()
            return n / (time.perf_counter() - t0)


async def bench_outbox_relay(url: str, n: int) -> float:
    """One outbox relay publishing ``n`` committed rows from PostgreSQL (outbox_rows.py)."""
    from outbox_rows import relay_throughput

    async with fresh(url) as broker:
        return await relay_throughput(broker, n)


async def bench_outbox_latency(url: str, samples: int) -> list[float]:
    """Commit of an outbox row on PostgreSQL -> handler start (outbox_rows.py)."""
    from outbox_rows import commit_to_start

    async with fresh(url) as broker:
        return await commit_to_start(broker, samples)


async def bench_latency(url: str, samples: int) -> list[float]:
    """Enqueue -> handler start, one job at a time, a worker at its defaults waiting."""
    app = App()
    mark = StartMark()

    @app.job
    async def noop(ctx: JobContext) -> None:
        mark.set()

    async with fresh(url) as broker, running(Worker(app, broker)):
        return await latencies(lambda: broker.enqueue("noop"), mark, samples)


async def bench_ticker_cpu(url: str, replicas: int, seconds: float, busy: bool) -> float:
    """CPU seconds per replica per wall second, in percent."""
    app = App()
    if busy:

        @app.job(every=1)
        async def tick(ctx: JobContext) -> None: ...

    else:
        for i in range(10):
            app.job(name=f"yearly_{i}", schedule=f"{i} 0 1 1 *")(_noop)
    async with isolated(url) as shared:
        brokers: list[BrokerProtocol] = []
        try:
            for _ in range(replicas):
                brokers.append(open_broker(shared))
                await brokers[-1].connect()
            await brokers[0].sync_schema()
            tickers = [Ticker(app.jobs.values(), b, clock_skew=1.0) for b in brokers]
            tasks = [asyncio.create_task(t.run()) for t in tickers]
            await asyncio.sleep(0.5)  # start-up (first slot computations) is not steady state
            c0, t0 = time.process_time(), time.perf_counter()
            await asyncio.sleep(seconds)
            for t in tickers:
                t.stop()
            await asyncio.gather(*tasks)
            cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        finally:
            for b in brokers:
                await b.close()
    return 100 * cpu / wall / replicas


async def _noop(ctx: JobContext) -> None: ...


def server_of(url: str) -> str:
    return url.partition("?")[0]


Rows = dict[str, list[tuple[str, Callable[[int], Awaitable[Any]]]]]
# Enqueue -> handler start, one job at a time with the consumer waiting: p50 and p99 rows.
LATENCY = "latency, idle worker,"
# Measurements that run only when --only names them.
OPT_IN = ("concurrency sweep",)
CONCURRENCIES = (1, 10, 25, 50, 100, 200)
# "enqueue one by one" times this share of -n jobs: round-trip bound, it is steady sooner.
ONE_BY_ONE_SHARE = 5


def ceilings(url: str) -> Rows:
    """Raw client rows (the ceiling an adapter is measured against), by measurement."""
    server = server_of(url)
    if url.startswith("nats://"):
        from peers_nats import raw_consume as nats_consume
        from peers_nats import raw_publish

        label = "raw nats-py, unique msg ids"
        return {
            "drain no-op jobs": [
                ("raw nats-py, fetch 50 + ack each", partial(nats_consume, server))
            ],
            "enqueue one by one": [(label, partial(raw_publish, server, inflight=1))],
            "enqueue, 100 in flight": [(label, partial(raw_publish, server, inflight=100))],
            "enqueue a batch": [
                (label + ", 100 in flight", partial(raw_publish, server, inflight=100))
            ],
        }
    if url.startswith(("redis://", "rediss://")):
        from peers_redis import raw_consume as redis_consume
        from peers_redis import raw_lua, raw_lua_pipelined

        label = "raw redis-py, same Lua script"
        return {
            "drain no-op jobs": [
                ("raw redis-py, XREADGROUP 50 + XACK/XDEL each", partial(redis_consume, server))
            ],
            "enqueue one by one": [(label, partial(raw_lua, server, inflight=1))],
            "enqueue, 100 in flight": [
                (label, partial(raw_lua, server, inflight=100)),
                ("raw redis-py, pipelined by 100", partial(raw_lua_pipelined, server)),
            ],
            "enqueue a batch": [
                ("raw redis-py, pipelined by 500", partial(raw_lua_pipelined, server, batch=500)),
            ],
        }
    if url.startswith(("amqp://", "amqps://")):
        from peers_rabbitmq import raw_consume as amqp_consume
        from peers_rabbitmq import raw_publish as raw_amqp

        label = "raw aio-pika, dedup exchange"
        return {
            "drain no-op jobs": [
                ("raw aio-pika, consume prefetch 100 + ack", partial(amqp_consume, server))
            ],
            "enqueue one by one": [(label, partial(raw_amqp, server, inflight=1))],
            "enqueue, 100 in flight": [(label, partial(raw_amqp, server, inflight=100))],
            "enqueue a batch": [
                (label + ", 100 in flight", partial(raw_amqp, server, inflight=100))
            ],
        }
    return {}


def peers(url: str) -> Rows:
    """Peer-library rows by measurement; they live in the bench environment only."""
    server = server_of(url)
    try:
        if url.startswith("nats://"):
            from peers_nats import taskiq_nats_drain, taskiq_nats_latency

            return {
                "drain no-op jobs": [("taskiq-nats", partial(taskiq_nats_drain, server))],
                LATENCY: [("taskiq-nats", partial(taskiq_nats_latency, server))],
            }
        if url.startswith(("redis://", "rediss://")):
            import peers_redis as r

            return {
                "drain no-op jobs": [
                    ("arq", partial(r.arq_drain_in_its_env, server)),
                    ("taskiq-redis", partial(r.taskiq_redis_drain, server)),
                    ("saq", partial(r.saq_drain, server)),
                ],
                LATENCY: [
                    ("arq", partial(r.arq_latency_in_its_env, server)),
                    ("taskiq-redis", partial(r.taskiq_redis_latency, server)),
                    ("saq", partial(r.saq_latency, server)),
                ],
            }
        if url.startswith(("amqp://", "amqps://")):
            from peers_rabbitmq import taskiq_aio_pika_drain, taskiq_aio_pika_latency

            return {
                "drain no-op jobs": [("taskiq-aio-pika", partial(taskiq_aio_pika_drain, server))],
                LATENCY: [("taskiq-aio-pika", partial(taskiq_aio_pika_latency, server))],
            }
    except ImportError:
        return {}
    return {}


Bench = Callable[[], Awaitable[Any]]


async def attempt(fn: Bench, deadline: float) -> tuple[Any, str | None]:
    """``fn()``'s result, or None and why it gave none: it took longer than ``deadline``
    seconds or raised."""
    try:
        async with asyncio.timeout(deadline):
            return await fn(), None
    except TimeoutError:
        return None, f"no result within {deadline:g}s"
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"[:200]


async def interleaved(
    rounds: int, subjects: list[tuple[str, Bench]], deadline: float
) -> list[tuple[str, float, str | None]]:
    """Run each subject ``rounds`` times, alternating, and keep each one's median. A run
    that takes longer than ``deadline`` seconds or raises fails its subject, with the
    reason; the others go on."""
    results: dict[str, list[float]] = {name: [] for name, _ in subjects}
    failed: dict[str, str] = {}
    for _ in range(rounds):
        for name, fn in subjects:
            if name in failed:
                continue
            value, error = await attempt(fn, deadline)
            if error is not None:
                failed[name] = error
            else:
                results[name].append(value)
    return [
        (name, statistics.median(values) if values and name not in failed else 0.0,
         failed.get(name))
        for name, values in results.items()
    ]  # fmt: skip


def percentile(values: list[float], q: int) -> float:
    """The ``q``-th percentile (1-99) of ``values``."""
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


async def latency_rows(label: str, subjects: list[tuple[str, Bench]], deadline: float) -> list[Row]:
    """p50 and p99 rows (milliseconds) of each subject's latencies, one run each."""
    runs = [(name, *await attempt(fn, deadline)) for name, fn in subjects]
    return [
        Row(f"{label} {LATENCY} {pct}", name,
            1000 * percentile(values, q) if error is None else 0.0, " ms", error)
        for pct, q in (("p50", 50), ("p99", 99))
        for name, values, error in runs
    ]  # fmt: skip


def wanted(measurement: str, only: list[str]) -> bool:
    """Whether ``measurement`` runs: those ``--only`` names, else all but the opt-in ones."""
    if not only:
        return measurement not in OPT_IN
    return any(o in measurement for o in only)


def throughput_groups(
    url: str, n: int, raw: Rows, other: Rows
) -> dict[str, list[tuple[str, Bench]]]:
    """Each throughput measurement's subjects: the raw client (``raw``) first, then
    framework-m, then the peers (``other``)."""
    one_by_one = max(1, n // ONE_BY_ONE_SHARE)
    groups: dict[str, list[tuple[str, Bench]]] = {
        "enqueue one by one": [
            ("framework-m, no dedup id", partial(bench_enqueue, url, one_by_one, False)),
            ("framework-m, dedup id", partial(bench_enqueue, url, one_by_one, True)),
        ],
        "enqueue, 100 in flight": [
            ("framework-m, dedup id", partial(bench_enqueue_concurrent, url, n)),
        ],
        "enqueue a batch": [
            ("framework-m enqueue_many, dedup ids", partial(bench_enqueue_many, url, n)),
        ],
        "outbox relay": [
            ("framework-m enqueue, 100 in flight", partial(bench_enqueue_concurrent, url, n)),
            ("outbox relay, from PostgreSQL", partial(bench_outbox_relay, url, n)),
        ],
        "drain no-op jobs": [
            ("framework-m worker, defaults", partial(bench_drain, url, n)),
            ("framework-m worker, metrics on", partial(bench_drain, url, n, True)),
            (
                "framework-m worker, keep_result=0",
                partial(bench_drain, url, n, False, None, None, 0.0),
            ),
            (
                "framework-m worker, job concurrency=50",
                partial(bench_drain, url, n, False, None, DEFAULT_CONCURRENCY),
            ),
            (
                "framework-m worker, job rate_limit=1000/s per i",
                partial(bench_drain, url, n, False, None, None, DEFAULT_KEEP, "1000/s"),
            ),
            (
                "framework-m worker, job unique per i",
                partial(bench_drain, url, n, False, None, None, DEFAULT_KEEP, None, True),
            ),
        ],
        "concurrency sweep": [
            (f"framework-m worker, concurrency {c}", partial(bench_drain, url, n, False, c))
            for c in CONCURRENCIES
        ],
    }
    if not url.startswith("memory:"):  # memory:// lives in one loop: no blocking client
        groups["enqueue one by one"].append(
            ("framework-m sync client, no dedup id", partial(bench_enqueue_sync, url, one_by_one))
        )
    for measurement, rows_ in raw.items():
        count = one_by_one if measurement == "enqueue one by one" else n
        groups[measurement][:0] = [(name, partial(fn, count)) for name, fn in rows_]
    for measurement, rows_ in other.items():
        if measurement in groups:
            groups[measurement] += [(name, partial(fn, n)) for name, fn in rows_]
    return groups


# The ticker CPU measurements: whether its schedule keeps it busy, measurement, subject.
TICKER_CPU = (
    (False, "ticker CPU, idle", "per replica, 10 schedules"),
    (True, "ticker CPU, 1s schedule", "per replica, 10 replicas"),
)


async def run(
    urls: list[str],
    n: int,
    ticker_seconds: float,
    with_peers: bool,
    rounds: int,
    only: list[str],
    deadline: float,
    rows: list[Row],
    samples: int = 300,
) -> list[Row]:
    """Measure, appending to ``rows`` and printing each measurement as it completes."""

    def done(new: list[Row]) -> None:
        rows.extend(new)
        print_rows(new)

    for url in urls:
        label = redact_url(url).split("?")[0]
        raw = ceilings(url)
        other = peers(url) if with_peers else {}
        for measurement, subjects in throughput_groups(url, n, raw, other).items():
            if wanted(measurement, only):
                results = await interleaved(rounds, subjects, deadline)
                done([Row(f"{label} {measurement}", *result[:2], "/s", result[2])
                      for result in results])  # fmt: skip
        if wanted(LATENCY, only):
            latency = [
                ("framework-m worker, defaults", partial(bench_latency, url, samples)),
                ("outbox on PostgreSQL, from commit", partial(bench_outbox_latency, url, samples)),
            ]
            latency += [(name, partial(fn, samples)) for name, fn in other.get(LATENCY, [])]
            done(await latency_rows(label, latency, deadline))
        for busy, measurement, subject in TICKER_CPU:
            if not wanted(measurement, only):
                continue
            bench = partial(bench_ticker_cpu, url, 10, ticker_seconds, busy=busy)
            [(_, cpu, error)] = await interleaved(1, [(subject, bench)], deadline)
            done([Row(f"{label} {measurement}", subject, cpu, "% CPU", error)])
    return rows


async def run_and_clean(args: argparse.Namespace, rows: list[Row]) -> None:
    n, secs, rounds, samples = (
        (200, 1.2, 1, 20)
        if args.quick
        else (args.n, args.ticker_seconds, args.rounds, args.samples)
    )
    urls = ["memory://", *args.broker]
    try:
        await run(urls, n, secs, not args.no_peers, rounds, args.only, args.deadline, rows, samples)
    finally:
        for cleanup in CLEANUPS:
            try:
                async with asyncio.timeout(10):
                    await cleanup()
            except Exception as exc:  # a broker gone away: what it holds stays, say so
                print(f"clean-up failed: {exc}", file=sys.stderr)


HEADER = f"{'measurement':<40} {'subject':<36} {'value':>14}  ratio"


def print_rows(rows: list[Row]) -> None:
    """Rows with their ratio to the first row of the same measurement."""
    first: dict[str, float] = {}
    for row in rows:
        if row.error is not None:
            print(f"{row.measurement:<40} {row.subject:<36} {'FAILED':>14}  {row.error}")
            continue
        base = first.setdefault(row.measurement, row.value)
        ratio = row.value / base if base else float("nan")
        value = f"{row.value:,.0f} {row.unit}" if row.unit == "/s" else f"{row.value:.3f}{row.unit}"
        print(f"{row.measurement:<40} {row.subject:<36} {value:>14}  {ratio:5.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", action="append", default=[], help="add a broker URL")
    parser.add_argument("-n", type=int, default=10_000, help="jobs per measurement")
    parser.add_argument("--ticker-seconds", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    parser.add_argument(
        "--samples", type=int, default=300, help="jobs timed one by one per latency subject"
    )
    parser.add_argument("--no-peers", action="store_true", help="skip peer libraries")
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs; median kept")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="TEXT",
        help="only measurements whose name contains TEXT (repeatable), e.g. 'drain'",
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=300.0,
        help="seconds one run of a subject may take before its row fails (300)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    started = time.monotonic()
    rows: list[Row] = []
    print(HEADER, flush=True)  # then each measurement's rows as they complete
    try:
        asyncio.run(run_and_clean(args, rows))  # Ctrl-C cancels it; clean-up still runs
    except KeyboardInterrupt:
        print("interrupted: the rows measured so far", file=sys.stderr)
    print(f"\nall rows:\n{HEADER}")
    print_rows(rows)
    print(f"\nthe run took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()

"""Where a worker's time goes while it drains no-op jobs: CPU per job, then cProfile.

    hatch run bench:python benchmarks/profile_drain.py nats://127.0.0.1:4222
    hatch run bench:python benchmarks/profile_drain.py redis://127.0.0.1:6379/0 --profile --top 40
    hatch run bench:python benchmarks/profile_drain.py memory:// --limit 50  # a lease per run
    hatch run bench:python benchmarks/profile_drain.py memory:// --rate 1000/s  # a start per run

The queue is filled first; only the drain is timed and profiled. Without --profile
it prints throughput and CPU microseconds per job (the profiler itself slows the
run about threefold, so compare its shares, not its times).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the modules beside this file
from run import fill, fresh, noop_app, running

from framework_m_core import Worker
from framework_m_core.jobs import DEFAULT_KEEP
from framework_m_core.runtime.worker import DEFAULT_CONCURRENCY


async def drain(
    url: str,
    n: int,
    concurrency: int,
    limit: int | None,
    keep: float,
    rate: str | None,
    profile: cProfile.Profile | None,
) -> None:
    app, done = noop_app(n, limit, keep, rate)
    async with fresh(url) as broker:
        await fill(broker, n, keep)
        worker = Worker(app, broker, concurrency=concurrency, fetch_timeout=0.1)
        await worker.prepare()
        if profile is not None:
            profile.enable()
        wall, cpu = time.perf_counter(), time.process_time()
        async with running(worker):
            await done.wait()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if profile is not None:
            profile.disable()
    print(
        f"{url} concurrency {concurrency}, job limit {limit}, rate {rate}, keep_result={keep:g}: "
        f"{n / wall:,.0f} jobs/s, "
        f"{cpu / n * 1e6:.0f} us CPU a job, CPU {cpu / wall:.0%} of the wall time"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default="memory://")
    parser.add_argument("-n", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    parser.add_argument("--limit", type=int, help="the job's concurrency= (a lease per run)")
    parser.add_argument(
        "--keep", type=float, default=DEFAULT_KEEP, help="the job's keep_result= (seconds)"
    )
    parser.add_argument("--rate", help="the job's rate_limit= per i (a start logged per run)")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--sort", default="tottime", help="pstats sort key (tottime)")
    args = parser.parse_args()
    profile = cProfile.Profile() if args.profile else None
    job = (args.limit, args.keep, args.rate)
    asyncio.run(drain(args.url, args.n, args.concurrency, *job, profile))
    if profile is not None:
        pstats.Stats(profile).sort_stats(args.sort).print_stats(args.top)


if __name__ == "__main__":
    main()

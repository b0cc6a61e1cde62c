"""Where an idle worker's latency goes: enqueue -> handler start, split into stages.

    hatch run bench:python benchmarks/latency_stages.py redis://127.0.0.1:6379/0
    hatch run bench:python benchmarks/latency_stages.py nats://127.0.0.1:4222 --samples 1000

One job at a time to a worker at its defaults, waiting for work (as the benchmark's
latency rows). Each stage is the time from the start of ``enqueue`` to: ``enqueue``
returning, the worker's receive returning the job, the job's task starting, the
handler starting. Percentiles are of each stage on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the modules beside this file
from common import StartMark
from run import fresh, percentile, running

from framework_m_core import App, Delivery, JobContext, Worker

STAGES = ("enqueue returned", "receive returned", "job task started", "handler started")


async def stages(url: str, samples: int) -> list[list[float]]:
    app, mark = App(), StartMark()
    marks: dict[str, float] = {}

    @app.job
    async def noop(ctx: JobContext) -> None:
        mark.set()

    async with fresh(url) as broker:
        receive, worker = broker.receive, Worker(app, broker)
        execution = worker._execution
        run = execution.run

        async def timed_receive(max_messages: int, timeout: float) -> Sequence[Delivery]:
            out = await receive(max_messages, timeout)
            if out:
                marks[STAGES[1]] = time.perf_counter()
            return out

        async def timed_run(delivery: Delivery) -> None:
            marks[STAGES[2]] = time.perf_counter()
            await run(delivery)

        broker.receive = timed_receive  # type: ignore[method-assign]
        execution.run = timed_run  # type: ignore[method-assign]
        out: list[list[float]] = [[] for _ in STAGES]
        async with running(worker):
            for k in range(samples + 1):  # a warm-up job first
                await asyncio.sleep(0.005)  # the worker is back to waiting for work
                mark.event.clear()
                marks.clear()
                t0 = time.perf_counter()
                await broker.enqueue("noop")
                marks[STAGES[0]] = time.perf_counter()
                async with asyncio.timeout(10):
                    await mark.event.wait()
                marks[STAGES[3]] = mark.at
                if k:
                    for i, stage in enumerate(STAGES):
                        out[i].append(marks[stage] - t0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default="memory://")
    parser.add_argument("--samples", type=int, default=500)
    args = parser.parse_args()
    results = asyncio.run(stages(args.url, args.samples))
    print(f"{args.url}, {args.samples} jobs one at a time, ms from the start of enqueue:")
    for stage, values in zip(STAGES, results, strict=True):
        p50, p99 = percentile(values, 50) * 1e3, percentile(values, 99) * 1e3
        print(f"  {stage:18} p50 {p50:6.3f}  p99 {p99:6.3f}")


if __name__ == "__main__":
    main()

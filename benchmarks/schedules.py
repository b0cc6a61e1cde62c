"""What schedules cost: next_after per call, and the ticker's CPU with 10,000 schedules.

    hatch run python benchmarks/schedules.py [--quick]

next_after is timed for a per-second and a daily cron, in UTC and in
Europe/Berlin within an hour of a DST change (where a naive evaluation walks
every slot near the change), against the target of 20 us a call. The ticker
runs 10,000 schedules on the embedded broker, 1,000 of them every second and the
rest daily, and reports its process CPU per tick and per second; then 10,000
daily schedules alone (idle), against the target of 0.1% of a core.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime

from framework_m_core import App, JobContext, Ticker, cron
from framework_m_core.adapters.memory import MemoryBroker, MemorySettings

TARGET_CALL_US = 20.0
TARGET_IDLE = 0.001


def per_call(expr: str, tz: str, start: float, calls: int) -> float:
    """Microseconds per next_after, chained from ``start`` as the ticker does."""
    schedule = cron(expr, tz)
    schedule.next_after(start)  # warm the zone's transition cache
    t0 = time.perf_counter()
    t = start
    for _ in range(calls):
        t = schedule.next_after(t)
    return (time.perf_counter() - t0) / calls * 1e6


async def ticker_cpu(every_second: int, daily: int, seconds: float) -> tuple[float, int]:
    """Process CPU seconds per wall second while the ticker runs, and its ticks."""
    app = App()
    for i in range(every_second):
        app.job(name=f"s{i}", schedule="* * * * * *")(_noop)
    for i in range(daily):
        app.job(name=f"d{i}", schedule=f"{i % 60} {i % 24} * * *", tz="Europe/Berlin")(_noop)
    broker = MemoryBroker(MemorySettings(f"bench-{every_second}-{daily}", dedup_window=600))
    async with broker:
        await broker.sync_schema()
        ticker = Ticker(app.jobs.values(), broker, grace=30)
        task = asyncio.create_task(ticker.run())
        await asyncio.sleep(1.5)  # start-up: schedules built, first slots fired
        published, cpu0, wall0 = ticker.stats.published, time.process_time(), time.monotonic()
        await asyncio.sleep(seconds)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        ticks = (ticker.stats.published - published) // max(every_second, 1)
        ticker.stop()
        await task
    return cpu / wall, ticks


async def _noop(ctx: JobContext) -> None: ...


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (numbers are rough)")
    args = parser.parse_args()
    calls = 2_000 if args.quick else 20_000
    seconds = 2.0 if args.quick else 10.0
    change = datetime(2026, 3, 29, 0, 30, tzinfo=UTC).timestamp()  # Berlin jumps at 01:00 UTC
    print(f"{'next_after':<48} {'us/call':>9} {'target':>8}")
    for label, expr, tz, start, n in [
        ("per-second cron, UTC", "* * * * * *", "UTC", change, calls),
        ("per-second cron, Berlin, at a DST change", "* * * * * *", "Europe/Berlin", change, calls),
        ("daily cron, UTC", "30 2 * * *", "UTC", change, calls // 10),
        ("daily cron, Berlin, at a DST change", "30 2 * * *", "Europe/Berlin", change, calls // 10),
        (
            "last Friday, Chatham: a new month each call",
            "0 9 * * 5L",
            "Pacific/Chatham",
            change,
            calls // 10,
        ),
    ]:
        us = per_call(expr, tz, start, n)
        print(f"{label:<48} {us:>9.1f} {TARGET_CALL_US:>8.0f}  {us / TARGET_CALL_US:.2f}x")
    busy, ticks = asyncio.run(ticker_cpu(1_000, 9_000, seconds))
    idle, _ = asyncio.run(ticker_cpu(0, 10_000, seconds))
    print(f"{'ticker, 10,000 schedules':<48} {'CPU':>9} {'target':>8}")
    per_tick = busy * seconds / max(ticks, 1) * 1000
    print(f"{'1,000 due every second: per tick':<48} {per_tick:>7.1f}ms")
    print(f"{'1,000 due every second: share of a core':<48} {busy:>9.2%}")
    print(f"{'none due (idle): share of a core':<48} {idle:>9.3%} {TARGET_IDLE:>8.1%}  "
          f"{idle / TARGET_IDLE:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()

"""What runtime schedules cost: 10,000 of them on a two-replica ticker pool.

    hatch run python benchmarks/runtime_schedules.py [--broker URL] [--quick]

Sets 10,000 runtime schedules (daily crons in many zones) on a namespace of its own,
starts two ticker replicas (each a process of its own, with its own connection) and
reports, side by side:

- each replica's CPU while idle (none due), against the target of 0.1% of a core;
- each replica's CPU while 1,000 of them fire every second, and the broker
  operations per slot (publishes, and the state reads and writes of pause and
  latest-slot bookkeeping) counted by the replicas;
- the time from ``set`` until both replicas tick a new schedule, and from
  ``delete`` until both dropped it.

Each replica counts its own process CPU (``time.process_time``), so the numbers
hold on a shared machine where the other processes come and go.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from framework_m_core import App, JobContext, Ticker
from framework_m_core.adapters.registry import open_broker
from framework_m_core.control import runtime_schedules
from framework_m_core.ports.store import Record, StoreProtocol, Write
from framework_m_core.testing import wait_until
from framework_m_core.testing.namespaces import namespace
from framework_m_core.testing.passing import PassingStore

TARGET_IDLE = 0.001
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Sydney")


class _CountingStore(PassingStore):
    """Counts the reads and writes of a broker's store."""

    def __init__(self, inner: StoreProtocol, counts: dict[str, int]) -> None:
        super().__init__(inner)
        self.counts = counts

    async def read(self, keys: Sequence[str]) -> list[Record | None]:
        self.counts["read_state"] += 1
        return await super().read(keys)

    async def write(self, writes: Sequence[Write]) -> list[int | None]:
        self.counts["write_state"] += 1
        return await super().write(writes)


class Counting:
    """Counts a broker's publishes and store calls (wraps the connected broker)."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.counts = {"publish": 0, "read_state": 0, "write_state": 0}
        self.store = _CountingStore(broker.store, self.counts)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.broker, name)
        if name in self.counts:

            async def counted(*args: Any, **kwargs: Any) -> Any:
                self.counts[name] += 1
                return await value(*args, **kwargs)

            return counted
        return value


async def replica(url: str, code: int) -> None:
    """One ticker replica (with ``code`` daily code schedules): prints ``ready``, then a
    sample (CPU, counts) as JSON for each line on stdin; says when it ticks or drops the
    runtime schedule ``probe``."""
    import logging

    class Probe(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage()
            if "runtime schedule probe " in text:
                what = "ticked" if " ticked:" in text else "dropped" if "deleted" in text else ""
                if what:
                    print(json.dumps({"event": what, "at": time.time()}), flush=True)

    logging.getLogger("framework_m.ticker").addHandler(Probe())
    logging.getLogger("framework_m.ticker").setLevel(logging.INFO)
    app = App()

    @app.job
    async def report(ctx: JobContext, n: int = 0) -> None: ...

    for i in range(code):
        expr, tz = f"{i % 60} {i % 24} * * *", ZONES[i % len(ZONES)]
        app.job(name=f"code{i}", schedule=expr, tz=tz)(report)

    async with open_broker(url) as raw:
        broker = Counting(raw)
        ticker = Ticker(app.jobs.values(), broker, grace=30)  # type: ignore[arg-type]
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker._ticking or task.done(), timeout=300)
        print(json.dumps({"event": "ready"}), flush=True)
        loop = asyncio.get_running_loop()
        while not task.done():
            # A sample when asked (a line on stdin): sampling costs no CPU in between.
            if not await loop.run_in_executor(None, sys.stdin.readline):
                break
            stats = ticker.stats
            print(
                json.dumps(
                    {
                        "cpu": time.process_time(),
                        "wall": time.monotonic(),
                        "published": stats.published,
                        "duplicates": stats.duplicates,
                        **broker.counts,
                    }
                ),
                flush=True,
            )


class Replica:
    def __init__(self, url: str, code: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--replica", url, "--code", str(code)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.samples: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            item = json.loads(line)
            if item.get("event") == "ready":
                self.ready.set()
            elif "event" in item:
                self.events.append(item)
            else:
                self.samples.append(item)

    def sample(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        count = len(self.samples)
        self.proc.stdin.write("sample\n")
        self.proc.stdin.flush()
        while len(self.samples) == count:
            time.sleep(0.01)
        return self.samples[-1]

    def window(self, seconds: float) -> dict[str, float]:
        """CPU share and counts over the next ``seconds``."""
        a = self.sample()
        time.sleep(seconds)
        b = self.sample()
        out = {k: b[k] - a[k] for k in a if k not in ("cpu", "wall")}
        out["cpu"] = (b["cpu"] - a["cpu"]) / (b["wall"] - a["wall"])
        out["seconds"] = b["wall"] - a["wall"]
        return out

    def first(self, event: str, after: float, timeout: float = 60.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in self.events:
                if e["event"] == event and e["at"] >= after:
                    return float(e["at"])
            time.sleep(0.01)
        raise TimeoutError(f"no {event} after {after}")

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.terminate()
        self.proc.wait(30)


async def fill(url: str, count: int, every: int) -> float:
    """Set ``count`` runtime schedules (the first ``every`` each second, the rest daily);
    return the sets per second."""
    async with open_broker(url) as broker:
        await broker.sync_schema()
        t0 = time.perf_counter()
        sem = asyncio.Semaphore(8)

        async def one(i: int) -> None:
            if i < every:
                s = runtime_schedules.runtime_schedule(
                    f"t{i}", "report", every_seconds=1, kwargs={"n": i}
                )
            else:
                expr, tz = f"{i % 60} {i % 24} * * *", ZONES[i % len(ZONES)]
                s = runtime_schedules.runtime_schedule(
                    f"t{i}", "report", cron_expression=expr, tz=tz, kwargs={"n": i}
                )
            async with sem:
                await runtime_schedules.set_schedule(broker, s)

        await asyncio.gather(*(one(i) for i in range(count)))
        return count / (time.perf_counter() - t0) if count else 0.0


async def change(url: str, set_it: bool) -> float:
    async with open_broker(url) as broker:
        at = time.time()
        if set_it:
            probe = runtime_schedules.runtime_schedule("probe", "report", every_seconds=3600)
            await runtime_schedules.set_schedule(broker, probe)
        else:
            await runtime_schedules.delete_schedule(broker, "probe")
        return at


def pool(url: str, seconds: float, code: int = 0) -> dict[str, Any]:
    replicas = [Replica(url, code) for _ in range(2)]
    try:
        for r in replicas:
            if not r.ready.wait(180):
                raise TimeoutError("a replica did not start")
        time.sleep(2)
        windows = [r.window(seconds) for r in replicas]  # one after the other: same load
        reach = []
        for set_it, event in ((True, "ticked"), (False, "dropped")):
            at = asyncio.run(change(url, set_it))
            reach.append(max(r.first(event, at) for r in replicas) - at)
        return {"windows": windows, "reach": reach}
    finally:
        for r in replicas:
            r.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--quick", action="store_true", help="fewer schedules, shorter runs")
    parser.add_argument("--replica", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--code", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.replica:
        asyncio.run(replica(args.replica, args.code))
        return
    count, firing = (1_000, 100) if args.quick else (10_000, 1_000)
    seconds = 3.0 if args.quick else 10.0
    rows = []
    runs = [
        (f"{count} code schedules, idle", 0),
        ("idle", 0),
        (f"{firing} firing every second", firing),
    ]
    for label, every in runs:
        code = count if label.endswith("code schedules, idle") else 0
        ns = namespace(args.broker)
        url = ns.url()
        try:
            rate = asyncio.run(fill(url, 0 if code else count, every))
            result = pool(url, seconds, code)
        finally:
            asyncio.run(ns.drop())
        rows.append((label, rate, result))
    print(f"{count} runtime schedules on {args.broker}, two ticker replicas")
    print(f"{'run':<28} {'replica':>7} {'CPU':>9} {'target':>8} {'ratio':>7} "
          f"{'pub/slot':>9} {'reads/slot':>10} {'writes/slot':>11} {'set reach':>9} "
          f"{'del reach':>9}")  # fmt: skip
    for label, rate, result in rows:
        for i, w in enumerate(result["windows"]):
            slots = (w["published"] + w["duplicates"]) or 1
            pub = w["publish"] / slots if w["publish"] else 0.0
            print(
                f"{label:<28} {i + 1:>7} {w['cpu'] * 100:>8.3f}% {TARGET_IDLE * 100:>7.1f}% "
                f"{w['cpu'] / TARGET_IDLE:>7.2f} {pub:>9.2f} "
                f"{w['read_state'] / slots:>10.2f} {w['write_state'] / slots:>11.2f} "
                f"{result['reach'][0]:>8.2f}s {result['reach'][1]:>8.2f}s"
            )
        if rate:
            print(f"{label:<28} sets: {rate:,.0f}/s")


if __name__ == "__main__":
    main()

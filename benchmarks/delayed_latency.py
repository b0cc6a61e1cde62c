"""How late a delayed job starts with an idle worker: from its due time to its handler's
start, on each shared broker of the development machine (``enqueue_at`` 1.5 s ahead,
ten jobs each). ``hatch run python benchmarks/delayed_latency.py``"""

import asyncio
import statistics
import time

from framework_m_core import App, JobContext, connect
from framework_m_core.testing import namespace, running_worker


async def measure(server: str, n: int = 10) -> list[float]:
    ns = namespace(server)
    url = ns.url()
    app, late = App(), []
    all_ran = asyncio.Event()

    @app.job
    async def timed(ctx: JobContext, due: float) -> None:
        late.append(time.time() - due)
        if len(late) == n:
            all_ran.set()

    try:
        async with (
            connect(url, sync_schema=True) as broker,
            running_worker(app, broker, fetch_timeout=1.0),
        ):
            await asyncio.sleep(1.0)
            for _ in range(n):
                due = time.time() + 1.5
                await broker.enqueue_at(due, "timed", due=due)
                await asyncio.sleep(0.7)
            async with asyncio.timeout(20):
                await all_ran.wait()
    finally:
        await ns.drop()
    return late


async def main() -> None:
    for server in [
        "redis://127.0.0.1:6379/0",
        "nats://127.0.0.1:4222",
        "amqp://guest:guest@127.0.0.1:5672/",
    ]:
        ms = sorted(x * 1000 for x in await measure(server))
        name = server.split(":")[0]
        print(f"{name:6} n={len(ms)}  median {statistics.median(ms):.0f} ms  max {ms[-1]:.0f} ms")


if __name__ == "__main__":
    asyncio.run(main())

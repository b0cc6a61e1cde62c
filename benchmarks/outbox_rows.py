"""The outbox's rows: commit -> handler start with an idle worker, and the relay's
throughput, each beside a direct enqueue on the same broker in the same run.

The outbox table lives in a scratch database on the PostgreSQL server of
``M_TEST_POSTGRESQL_URL`` (default: the one on loopback), dropped after each run.
"""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from common import START_TIMEOUT, StartMark
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from framework_m_core import App, BatchJob, JobContext, Worker
from framework_m_core.ports.protocols import BrokerProtocol
from framework_m_outbox import Outbox, OutboxRelay, sync_schema
from framework_m_outbox.database import parse
from framework_m_outbox.testing import scratch_database


@contextlib.asynccontextmanager
async def outbox_database() -> AsyncIterator[tuple[str, AsyncEngine]]:
    """A scratch PostgreSQL database with the outbox table, and an async engine on it."""
    with scratch_database("postgresql") as url:
        await sync_schema(url)
        engine = create_async_engine(parse(url))
        try:
            yield url, engine
        finally:
            await engine.dispose()


async def commit_to_start(broker: BrokerProtocol, samples: int) -> list[float]:
    """Seconds from the commit of a transaction that wrote one outbox row to the handler's
    start, one at a time, with the worker and its relay idle (waiting) before each."""
    app = App()
    mark = StartMark()

    @app.job
    async def noop(ctx: JobContext) -> None:
        mark.set()

    async with outbox_database() as (url, engine):
        relay = OutboxRelay(url, broker)
        worker = Worker(app, broker, relays=[relay])
        task = asyncio.create_task(worker.run())
        try:
            out: list[float] = []
            for k in range(samples + 1):
                await asyncio.sleep(0.005)  # the relay and consumer are back to waiting
                mark.event.clear()
                async with engine.connect() as conn:
                    await noop.enqueue(Outbox(conn))
                    t0 = time.perf_counter()
                    await conn.commit()
                async with asyncio.timeout(START_TIMEOUT):
                    await mark.event.wait()
                if k:
                    out.append(mark.at - t0)
            return out
        finally:
            worker.stop()
            await asyncio.gather(task, return_exceptions=True)


async def relay_throughput(broker: BrokerProtocol, n: int) -> float:
    """Rows a second one relay publishes (and deletes) from a table holding ``n``
    committed rows, from its start to the last delete."""
    async with outbox_database() as (url, engine):
        async with engine.begin() as conn:
            writer = Outbox(conn)
            for start in range(0, n, 1000):
                await writer.enqueue_many(
                    [BatchJob("noop", {"i": i}) for i in range(start, min(n, start + 1000))]
                )
        relay = OutboxRelay(url, broker)
        t0 = time.perf_counter()
        task = asyncio.create_task(relay.run())
        try:
            while relay.relayed < n:
                if task.done():
                    task.result()
                    raise RuntimeError(f"the relay stopped after {relay.relayed} of {n}")
                await asyncio.sleep(0.005)
            return n / (time.perf_counter() - t0)
        finally:
            relay.stop()
            await asyncio.gather(task, return_exceptions=True)

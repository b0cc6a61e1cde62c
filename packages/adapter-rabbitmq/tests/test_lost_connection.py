"""A dropped connection: RabbitMQ hands its unacked deliveries to another consumer at
once, so the runs of those deliveries are stopped at once, not at their next
extension (minutes later), and the reconnect does not pretend to hold them."""

from __future__ import annotations

import asyncio
import time

import pytest

from framework_m_core import App, JobContext
from framework_m_core.testing import running_worker, wait_until
from framework_m_core.testing.proxy import Proxy
from framework_m_rabbitmq import RabbitBroker
from framework_m_rabbitmq.testing import RabbitNamespace

pytestmark = pytest.mark.anyio


async def test_a_run_whose_connection_dropped_is_stopped_at_once_and_runs_again(
    namespace: RabbitNamespace, caplog: pytest.LogCaptureFixture
) -> None:
    app = App()
    events: list[tuple[str, int, float]] = []

    @app.job(max_attempts=3)
    async def long(ctx: JobContext) -> None:
        events.append(("start", ctx.attempt, time.monotonic()))
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            events.append(("stop", ctx.attempt, time.monotonic()))
            raise

    async with RabbitBroker.from_url(namespace.url()) as direct:
        await direct.sync_schema()
        proxy = Proxy(namespace.url())
        await proxy.start()
        try:
            async with (
                RabbitBroker.from_url(proxy.url) as broker,
                running_worker(app, broker, shutdown_timeout=0.5) as worker,
            ):
                await direct.enqueue("long")
                await wait_until(lambda: any(e[0] == "start" for e in events), timeout=20)
                await proxy.cut()
                cut = time.monotonic()
                await wait_until(lambda: any(e[0] == "stop" for e in events), timeout=10)
                [(_, attempt, stopped)] = [e for e in events if e[0] == "stop"]
                assert attempt == 1
                assert stopped - cut < 2, f"stopped {stopped - cut:.1f}s after the drop"
                await wait_until(lambda: worker.stats.lost == 1, timeout=10)
                await proxy.start()  # back: the job, returned to the queue, runs again
                await wait_until(lambda: len([e for e in events if e[0] == "start"]) == 2, 30)
                assert events[-1][:2] == ("start", 2)
        finally:
            await proxy.cut()
    said = caplog.text
    assert "lost their deliveries: the channel it came on closed" in said
    assert "lost while it ran" in said

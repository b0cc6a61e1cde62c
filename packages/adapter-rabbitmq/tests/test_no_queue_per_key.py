"""The control plane keeps its records in the store exchange, not in queues: pausing a
schedule, running a limited job, setting a runtime schedule and reading a job's status
leave the broker with the queues schema sync declared and no other."""

from __future__ import annotations

import asyncio

import pytest

from framework_m_core import App, JobContext, Worker, job_status, wait_result
from framework_m_core.control import runtime_schedules, steering
from framework_m_rabbitmq import RabbitBroker
from framework_m_rabbitmq.testing import RabbitNamespace

pytestmark = pytest.mark.anyio


async def queues(prefix: str) -> set[str]:
    """The names of the node's queues that start with ``prefix``."""
    proc = await asyncio.create_subprocess_exec(
        "rabbitmqctl", "--quiet", "list_queues", "name", "--no-table-headers",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate()
    return {name for name in out.decode().split() if name.startswith(prefix)}


async def test_control_calls_leave_no_queue_per_key_or_per_place(
    namespace: RabbitNamespace,
) -> None:
    app = App()
    ran = asyncio.Event()

    @app.job(concurrency=1)
    async def limited(ctx: JobContext) -> int:
        ran.set()
        return 7

    @app.job(every=3600)
    async def hourly(ctx: JobContext) -> None: ...

    async with RabbitBroker.from_url(namespace.url()) as broker:
        await broker.sync_schema()
        declared = await queues(f"{namespace.name}.")
        await steering.pause(broker, "hourly", reason="maintenance")
        await runtime_schedules.set_schedule(
            broker,
            runtime_schedules.runtime_schedule("nightly", "limited", cron_expression="0 3 * * *"),
        )
        job_id = await broker.enqueue("limited")
        worker = Worker(app, broker, concurrency=2, fetch_timeout=0.2)
        task = asyncio.create_task(worker.run())
        try:
            assert await wait_result(broker, job_id, timeout=30) == 7
        finally:
            worker.stop()
            await task
        assert ran.is_set()
        assert (await job_status(broker, job_id)).state == "succeeded"
        assert (await steering.read(broker, "hourly")).paused
        assert await runtime_schedules.get_schedule(broker, "nightly") is not None
        assert await queues(f"{namespace.name}.") == declared

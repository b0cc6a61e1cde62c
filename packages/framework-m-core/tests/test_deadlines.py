"""A run's time limit (its job's ``timeout``): one timer for all of a worker's runs."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from framework_m_core import App, JobContext
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.runtime.deadlines import Deadlines
from framework_m_core.testing import running_worker, wait_until

pytestmark = pytest.mark.anyio


async def test_a_short_timeout_started_after_a_long_one_fires_first(
    memory: MemoryBroker,
) -> None:
    app = App()
    ended: dict[str, float] = {}
    start = time.monotonic()

    @app.job(timeout=30, max_attempts=1)
    async def long(ctx: JobContext) -> None:
        await asyncio.sleep(3)
        ended["long"] = time.monotonic() - start

    @app.job(timeout=0.2, max_attempts=1)
    async def short(ctx: JobContext) -> None:
        await asyncio.sleep(30)

    await memory.enqueue("long")
    async with running_worker(app, memory) as worker:
        await wait_until(lambda: worker.stats.received == 1)
        await memory.enqueue("short")
        await wait_until(lambda: worker.stats.dead_lettered == 1, 2)
        assert "long" not in ended  # the long run goes on, within its own limit
        await wait_until(lambda: worker.stats.succeeded == 1)
    [dead] = await memory.dead_letters()
    assert "timed out after 0.2s" in dead.reason


async def test_runs_of_one_job_each_time_out_at_their_own_deadline(
    memory: MemoryBroker,
) -> None:
    app = App()

    @app.job(timeout=1.0, max_attempts=1)
    async def slow(ctx: JobContext) -> None:
        await asyncio.sleep(30)

    await memory.enqueue("slow")
    async with running_worker(app, memory) as worker:
        await wait_until(lambda: worker.stats.received == 1)
        await asyncio.sleep(0.5)  # the second run starts half a limit later
        await memory.enqueue("slow")
        await wait_until(lambda: worker.stats.dead_lettered == 1, 3)
        assert worker.stats.dead_lettered == 1  # not both at the first one's deadline
        await wait_until(lambda: worker.stats.dead_lettered == 2, 3)


async def test_a_timeout_error_the_handler_raises_is_its_own(memory: MemoryBroker) -> None:
    app = App()

    @app.job(timeout=30, max_attempts=1)
    async def raises(ctx: JobContext) -> None:
        raise TimeoutError("upstream")

    await memory.enqueue("raises")
    async with running_worker(app, memory) as worker:
        await wait_until(lambda: worker.stats.dead_lettered == 1)
    [dead] = await memory.dead_letters()
    assert "TimeoutError raised by the handler" in dead.reason


async def test_a_handler_that_swallows_its_timeout_leaves_the_task_uncancelled() -> None:
    deadlines = Deadlines()
    limit = deadlines.start(0.05)
    with contextlib.suppress(asyncio.CancelledError):  # a handler catching the cancel
        await asyncio.sleep(5)
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 1
    assert deadlines.stop(limit) is True
    assert task.cancelling() == 0
    assert deadlines.stop(limit) is False  # a second stop changes nothing
    await asyncio.sleep(0.01)  # and the task goes on awaiting


async def test_a_cancel_from_elsewhere_is_not_taken_for_a_timeout() -> None:
    deadlines = Deadlines()

    async def run() -> str:
        limit = deadlines.start(30)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "timed out" if deadlines.stop(limit) else "cancelled"
        return "ran"

    task = asyncio.get_running_loop().create_task(run())
    await asyncio.sleep(0.01)
    task.cancel()
    assert await task == "cancelled"


async def test_a_run_that_ended_is_never_cancelled() -> None:
    deadlines = Deadlines()
    limit = deadlines.start(0.05)
    assert deadlines.stop(limit) is False
    await asyncio.sleep(0.15)  # past the deadline: no cancel arrives
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0

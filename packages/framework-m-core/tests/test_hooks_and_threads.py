"""Startup and shutdown hooks with the state they share, and plain ``def`` handlers."""

from __future__ import annotations

import threading

import pytest

from framework_m_core import App, JobContext, Worker
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.jobs import State
from framework_m_core.testing import running_worker, wait_until

pytestmark = pytest.mark.anyio


async def test_hooks_wrap_every_job_and_their_state_reaches_handlers(
    memory: MemoryBroker,
) -> None:
    app, events = App(), []

    @app.on_startup
    async def open_pool(state: State) -> None:
        events.append("open pool")
        state.pool = ["connection"]

    @app.on_startup
    def open_client(state: State) -> None:  # a plain def hook too
        events.append("open client")
        state.client = "client"

    @app.on_shutdown
    async def close_pool(state: State) -> None:
        events.append("close pool")

    @app.on_shutdown
    def close_client(state: State) -> None:
        raise RuntimeError("teardown fails")  # logged; the other hooks still run

    @app.job
    async def use(ctx: JobContext) -> None:
        events.append(f"job with {ctx.state.pool[0]} and {ctx.state.client}")

    await memory.enqueue("use")
    async with running_worker(app, memory) as worker:
        await wait_until(lambda: worker.stats.succeeded == 1)
        assert events[:2] == ["open pool", "open client"]
    assert events == ["open pool", "open client", "job with connection and client", "close pool"]


async def test_a_failing_startup_hook_stops_the_start_before_any_job(
    memory: MemoryBroker,
) -> None:
    app, ran = App(), []

    @app.on_startup
    async def broken(state: State) -> None:
        raise ConnectionError("database unreachable")

    @app.job
    async def job(ctx: JobContext) -> None:
        ran.append(1)

    await memory.enqueue("job")
    worker = Worker(app, memory)
    with pytest.raises(ConnectionError, match="database unreachable"):
        await worker.run()
    assert ran == []
    assert len(await memory.receive(10, 0.1)) == 1  # the job waits for a worker that starts


async def test_plain_def_handlers_run_in_the_pool_without_blocking_the_loop(
    memory: MemoryBroker,
) -> None:
    app, threads = App(max_attempts=1), set()
    together = threading.Barrier(4, timeout=10)  # four blocking handlers at once
    beats_done = threading.Event()
    beats = 0

    @app.job
    def blocking(ctx: JobContext, n: int) -> None:
        threads.add(threading.current_thread().name)
        together.wait()
        assert beats_done.wait(10), "the event loop was blocked"

    @app.job
    async def beat(ctx: JobContext) -> None:
        nonlocal beats
        beats += 1
        if beats == 20:
            beats_done.set()

    for n in range(4):
        await memory.enqueue("blocking", n=n)
    for _ in range(20):
        await memory.enqueue("beat")
    async with running_worker(app, memory, concurrency=8, threads=4) as worker:
        await wait_until(lambda: worker.stats.succeeded + worker.stats.dead_lettered == 24, 15)
    assert (worker.stats.succeeded, worker.stats.dead_lettered) == (24, 0)
    assert len(threads) == 4
    assert all(name.startswith("framework-m-job") for name in threads)


async def test_a_plain_def_handler_past_its_timeout_fails_the_attempt(
    memory: MemoryBroker,
) -> None:
    app = App(backoff=0.01)
    release = threading.Event()

    @app.job(timeout=0.2, max_attempts=1)
    def stuck(ctx: JobContext) -> None:
        release.wait(5)

    await memory.enqueue("stuck")
    try:
        async with running_worker(app, memory) as worker:
            await wait_until(lambda: worker.stats.dead_lettered == 1)
    finally:
        release.set()
    [dead] = await memory.dead_letters()
    assert "timed out after 0.2s" in dead.reason

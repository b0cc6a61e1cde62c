"""The stall watchdog: a handler blocking the event loop is named while it blocks it."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from framework_m_core import App, JobContext
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.observability.observer import Observer
from framework_m_core.testing import running_worker, wait_until

pytestmark = pytest.mark.anyio


class Counting(Observer):
    def __init__(self) -> None:
        self.stalls = 0
        self.lags: list[float] = []

    def loop_stalled(self) -> None:
        self.stalls += 1

    def loop_lag(self, seconds: float) -> None:
        self.lags.append(seconds)


async def test_a_handler_blocking_the_loop_is_named_with_its_line_and_the_fix(
    memory: MemoryBroker, caplog: pytest.LogCaptureFixture
) -> None:
    app = App()
    done = asyncio.Event()

    @app.job
    async def blocker(ctx: JobContext) -> None:
        time.sleep(1.0)  # noqa: ASYNC251 - the mistake the watchdog names
        done.set()

    observer = Counting()
    job_id = await memory.enqueue("blocker")
    with caplog.at_level(logging.WARNING, "framework_m.worker"):
        async with running_worker(app, memory, stall_warning=0.3, observer=observer):
            await asyncio.wait_for(done.wait(), 10)
            await wait_until(lambda: "runs again" in caplog.text, timeout=5)
    [stalled] = [r.getMessage() for r in caplog.records if "has been blocked" in r.getMessage()]
    assert f"jobs running: blocker[{job_id}]" in stalled
    assert "test_stalls.py:" in stalled
    assert "in blocker (time.sleep(1.0)" in stalled
    assert "make the handler a plain `def`" in stalled
    assert observer.stalls == 1
    assert max(observer.lags) >= 0.7  # the loop woke that late once


async def test_a_handler_that_awaits_stalls_nothing(
    memory: MemoryBroker, caplog: pytest.LogCaptureFixture
) -> None:
    app = App()
    done = asyncio.Event()

    @app.job
    async def sleeper(ctx: JobContext) -> None:
        await asyncio.sleep(1.0)
        done.set()

    observer = Counting()
    await memory.enqueue("sleeper")
    with caplog.at_level(logging.WARNING, "framework_m.worker"):
        async with running_worker(app, memory, stall_warning=0.3, observer=observer):
            await asyncio.wait_for(done.wait(), 10)
            beats = len(observer.lags)
            await wait_until(lambda: len(observer.lags) > beats + 2, timeout=5)
    assert observer.stalls == 0
    assert "blocked" not in caplog.text

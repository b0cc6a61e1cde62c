"""The worker's cancel watch: it ends when it is cancelled, whatever its broker raises."""

from __future__ import annotations

import asyncio

import pytest

from framework_m_core.adapters.memory import MemoryBroker, MemorySettings
from framework_m_core.errors import BrokerError
from framework_m_core.observability.observer import Observer
from framework_m_core.ports import StateEntry
from framework_m_core.runtime.cancels import Cancellation, CancelWatch
from framework_m_core.testing import synced, wait_until

pytestmark = pytest.mark.anyio


class _Swallowing(MemoryBroker):
    """A broker whose client turns a cancelled wait into an error of its own."""

    waits = 0

    async def _wait_state(self, key: str, version: int | None, timeout: float) -> StateEntry | None:
        self.waits += 1
        try:
            return await super()._wait_state(key, version, timeout)
        except asyncio.CancelledError:
            raise BrokerError("request cut short") from None


async def test_a_watch_stops_when_cancelled_though_its_broker_swallows_it(
    queue_name: str,
) -> None:
    broker = await synced(_Swallowing(MemorySettings(queue_name, 120.0, 5.0)))
    watch = CancelWatch(broker, Observer())
    assert await watch.start("job-1", Cancellation())
    task = asyncio.create_task(watch.run())
    await wait_until(lambda: broker.waits >= 1, timeout=5)
    task.cancel()
    async with asyncio.timeout(5):
        with pytest.raises(asyncio.CancelledError):
            await task


class _Deaf(MemoryBroker):
    """A broker whose client swallows a cancellation whole (and uncancels the task)."""

    async def _wait_state(self, key: str, version: int | None, timeout: float) -> StateEntry | None:
        try:
            return await super()._wait_state(key, version, timeout)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            return None


async def test_a_closed_watch_ends_though_its_broker_ate_the_cancellation(
    queue_name: str,
) -> None:
    broker = await synced(_Deaf(MemorySettings(queue_name, 120.0, 5.0)))
    watch = CancelWatch(broker, Observer())
    assert await watch.start("job-1", Cancellation())
    task = asyncio.create_task(watch.run())
    await asyncio.sleep(0.2)  # inside its first wait
    watch.close()
    task.cancel()
    async with asyncio.timeout(5):
        await asyncio.gather(task, return_exceptions=True)
    assert task.done()

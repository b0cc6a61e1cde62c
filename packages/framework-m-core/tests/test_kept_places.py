"""A worker keeps a limit's place between its runs of one key (runtime/places.py): the
next run takes it over without a claim, a place nobody takes over is released after
KEEP, one too old to take over is released, and a stopping worker releases them all."""

from __future__ import annotations

import asyncio
import time

import pytest

from framework_m_core import App, JobContext, Worker
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.control.shared import shared
from framework_m_core.ports.store import Claim
from framework_m_core.runtime.places import KEEP, KeptPlaces
from framework_m_core.testing.helpers import wait_until

pytestmark = pytest.mark.anyio

KEY, TTL = "concurrency:report", 30.0


async def held_place(broker: MemoryBroker, holder: str, written: float) -> KeptPlaces:
    """A KeptPlaces whose run ``holder`` held KEY's one place, written at ``written``
    (monotonic), and has just ended."""
    assert await shared(broker).acquire_lease(KEY, holder, TTL)
    places = KeptPlaces(broker)
    places.written(KEY, holder, written)
    places.keep(KEY, holder)
    return places


async def test_the_next_run_takes_over_a_kept_place(memory: MemoryBroker) -> None:
    places = await held_place(memory, "run-1", time.monotonic())
    assert places.take(KEY, TTL) == "run-1"
    assert places.take(KEY, TTL) is None  # one place, taken over once
    await asyncio.sleep(KEEP * 3)  # taken over: not released when KEEP passed
    assert await shared(memory).lease_holders(KEY) == ["run-1"]
    assert not await shared(memory).acquire_lease(KEY, "elsewhere", TTL)


async def test_a_place_nobody_takes_over_is_released_after_keep(memory: MemoryBroker) -> None:
    places = await held_place(memory, "run-1", time.monotonic())
    assert await shared(memory).lease_holders(KEY) == ["run-1"]  # kept, still held
    await wait_until(lambda: _free(memory), timeout=KEEP + 5, what="the kept place released")
    assert places.take(KEY, TTL) is None
    assert await shared(memory).acquire_lease(KEY, "elsewhere", TTL)


async def test_a_place_too_old_to_take_over_is_released(memory: MemoryBroker) -> None:
    # Written more than a third of its ttl ago: the next run's first heartbeat could
    # come after it expired, so it is not taken over.
    places = await held_place(memory, "run-1", time.monotonic() - TTL / 2)
    assert places.take(KEY, TTL) is None
    await wait_until(lambda: _free(memory), timeout=5, what="the old place released")


async def test_a_worker_reuses_its_place_and_releases_it_when_it_stops(
    memory: MemoryBroker,
) -> None:
    app = App()
    runs = 20
    done = asyncio.Event()
    ran = 0

    @app.job(concurrency=1)
    async def report(ctx: JobContext, n: int) -> None:
        nonlocal ran
        ran += 1
        if ran == runs:
            done.set()

    claims = 0
    claim = memory.store.claim

    async def counted(key: str, places: int, value: bytes, ttl: float) -> Claim | None:
        nonlocal claims
        claims += 1
        return await claim(key, places, value, ttl)

    memory.store.claim = counted  # type: ignore[method-assign]
    for n in range(runs):
        await memory.enqueue("report", n=n)
    worker = Worker(app, memory, concurrency=1, fetch_timeout=0.05)
    task = asyncio.create_task(worker.run())
    async with asyncio.timeout(30):
        await done.wait()
    worker.stop()
    await task
    assert claims <= runs // 2, f"{claims} claims for {runs} runs one after another"
    assert await shared(memory).lease_holders("concurrency:report") == []  # released at once


async def _free(broker: MemoryBroker) -> bool:
    return await shared(broker).lease_holders(KEY) == []

"""The heartbeat sweep: one task keeps every long run's delivery and leases reserved."""

from __future__ import annotations

import asyncio

import pytest

from framework_m_core.adapters.memory import MemoryBroker, MemorySettings
from framework_m_core.control.shared import shared
from framework_m_core.runtime.heartbeats import Heartbeats
from framework_m_core.testing import synced

pytestmark = pytest.mark.anyio

VISIBILITY = 0.6


@pytest.fixture
async def short(queue_name: str) -> MemoryBroker:
    settings = MemorySettings(queue_name, dedup_window=120.0, visibility_timeout=VISIBILITY)
    return await synced(MemoryBroker(settings))


async def test_one_sweep_keeps_runs_started_apart_reserved_and_lets_a_stopped_one_go(
    short: MemoryBroker,
) -> None:
    for n in range(3):
        await short.enqueue("long", n=n)
    beats = Heartbeats(short)
    held = []
    for _ in range(3):  # three runs starting a third of an interval apart
        [delivery] = await short.receive(1, 1)
        held.append((delivery, beats.start(delivery)))
        await asyncio.sleep(VISIBILITY / 9)
    loop = asyncio.get_running_loop()
    until = loop.time() + VISIBILITY * 3
    while loop.time() < until:  # no delivery comes back while its run goes on
        assert list(await short.receive(10, 0.05)) == []
    assert len(beats) == 3
    gone, beat = held[1]
    beats.stop(beat)
    async with asyncio.timeout(VISIBILITY * 3):  # its reservation runs out, not the others'
        [again] = await short.receive(10, VISIBILITY * 3)
    assert (again.body, again.attempt) == (gone.body, 2)
    for delivery, beat in (held[0], held[2]):
        beats.stop(beat)
        await short.ack(delivery)
    await short.ack(again)
    assert len(beats) == 0


async def test_a_long_run_keeps_its_lease_past_the_lease_ttl(short: MemoryBroker) -> None:
    await short.enqueue("long")
    [delivery] = await short.receive(1, 1)
    assert await shared(short).acquire_lease("overlap:long", "run-1", VISIBILITY)
    beats = Heartbeats(short)
    beat = beats.start(delivery, [("overlap:long", "run-1")])
    await asyncio.sleep(VISIBILITY * 2.5)
    assert not await shared(short).acquire_lease("overlap:long", "run-2", VISIBILITY)
    assert await shared(short).lease_holders("overlap:long") == ["run-1"]
    beats.stop(beat)
    await short.ack(delivery)


async def test_the_sweep_ends_when_the_last_run_stops(short: MemoryBroker) -> None:
    await short.enqueue("short")
    [delivery] = await short.receive(1, 1)
    beats = Heartbeats(short)
    beat = beats.start(delivery)
    task = beats._task
    assert task is not None
    beats.stop(beat)
    await asyncio.sleep(0)
    assert task.done()
    assert beats._task is None
    await short.ack(delivery)

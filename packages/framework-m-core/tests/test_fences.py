"""A run whose delivery the broker took back (its process frozen past the reservation)
stops, writes no status and settles nothing: the replica that has the job now owns it.
In one process, a frozen replica is one whose receives and reservation renewals are
held back until it thaws (tests/test_fencing.py freezes real processes)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import pytest

from framework_m_core import App, JobContext
from framework_m_core.adapters.memory import MemoryBroker, MemorySettings
from framework_m_core.control.jobs import job_status
from framework_m_core.errors import DeliveryLostError
from framework_m_core.ports import Delivery
from framework_m_core.ports.statuses import JobState
from framework_m_core.testing import running_worker, synced, wait_until

pytestmark = pytest.mark.anyio


def freeze(broker: MemoryBroker, monkeypatch: pytest.MonkeyPatch, after: int = 1) -> asyncio.Event:
    """Hold back ``broker``'s extensions, and its receives once ``after`` deliveries
    came, until the event returned is set."""
    thawed = asyncio.Event()
    extend, receive = broker.extend, broker.receive
    came = 0

    async def held_extend(delivery: Delivery) -> None:
        await thawed.wait()
        await extend(delivery)

    async def held_receive(n: int, timeout: float) -> Sequence[Delivery]:
        nonlocal came
        if came >= after:
            await thawed.wait()
        got = await receive(min(n, max(after - came, 1)) if not thawed.is_set() else n, timeout)
        came += len(got)
        return got

    monkeypatch.setattr(broker, "extend", held_extend)
    monkeypatch.setattr(broker, "receive", held_receive)
    return thawed


async def test_a_run_whose_delivery_was_taken_back_stops_and_keeps_no_status(
    queue_name: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings = MemorySettings(queue_name, dedup_window=60.0, visibility_timeout=1.0)
    frozen = await synced(MemoryBroker(settings))
    other = await synced(MemoryBroker(settings))
    app, events = App(), []

    @app.job
    async def slow(ctx: JobContext) -> None:
        events.append(("start", ctx.attempt))
        await asyncio.sleep(4.0 if ctx.attempt == 1 else 0.1)
        events.append(("end", ctx.attempt))

    thawed = freeze(frozen, monkeypatch)
    caplog.set_level(logging.WARNING, logger="framework_m")
    job_id = await frozen.enqueue("slow")
    async with running_worker(app, frozen) as first:
        await wait_until(lambda: events == [("start", 1)], what="the first run")
        async with running_worker(app, other) as second:
            await wait_until(lambda: second.stats.succeeded == 1, timeout=10, what="the rerun")
            thawed.set()
            await wait_until(lambda: first.stats.lost == 1, timeout=5, what="the first run lost")
    assert events == [("start", 1), ("start", 2), ("end", 2)]  # never ended twice
    assert (first.stats.succeeded, first.stats.cancelled, first.stats.retried) == (0, 0, 0)
    status = await job_status(other, job_id)
    assert (status.state, status.attempts) == (JobState.SUCCEEDED, 2)
    assert f"slow[{job_id}] lost while it ran" in caplog.text


async def test_a_delivery_taken_back_while_it_waited_for_a_place_never_starts(
    queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = MemorySettings(queue_name, dedup_window=60.0, visibility_timeout=1.0)
    frozen = await synced(MemoryBroker(settings))
    other = await synced(MemoryBroker(settings))
    app, events = App(), []

    @app.job(concurrency=1)
    async def one(ctx: JobContext, n: int) -> None:
        events.append(("start", n, ctx.attempt))
        await asyncio.sleep(3.0 if ctx.attempt == 1 else 0.05)
        events.append(("end", n, ctx.attempt))

    thawed = freeze(frozen, monkeypatch, after=2)
    await frozen.enqueue("one", n=1)
    await frozen.enqueue("one", n=2)  # waits on the frozen replica for the place of n=1
    async with running_worker(app, frozen, concurrency=2) as first:
        await wait_until(lambda: first.stats.waiting == 1, what="n=2 waiting for the place")
        async with running_worker(app, other) as second:
            await wait_until(lambda: second.stats.succeeded == 2, timeout=15, what="both rerun")
            thawed.set()
            await wait_until(lambda: first.stats.lost == 2, timeout=5, what="both lost")
    assert [e for e in events if e[0] == "end"] == [("end", 1, 2), ("end", 2, 2)] or [
        e for e in events if e[0] == "end"
    ] == [("end", 2, 2), ("end", 1, 2)]
    assert ("start", 2, 1) not in events  # never started where it had been taken back
    assert first.stats.succeeded == 0


async def test_a_run_is_stopped_before_its_next_step_when_the_loop_was_blocked_too_long(
    queue_name: str,
) -> None:
    memory = await synced(MemoryBroker(MemorySettings(queue_name, 60.0, visibility_timeout=1.0)))
    app, steps, thawed = App(), [], []
    ttl = memory.visibility_timeout

    @app.job
    async def stepping(ctx: JobContext) -> None:
        while True:
            steps.append((ctx.attempt, time.monotonic()))
            await asyncio.sleep(0.05)

    @app.job
    async def blocking(ctx: JobContext) -> None:
        if ctx.attempt == 1:
            time.sleep(ttl + 0.5)  # noqa: ASYNC251 - the freeze under test
            thawed.append(time.monotonic())

    async with running_worker(app, memory) as worker:
        await memory.enqueue("stepping")
        await wait_until(lambda: len(steps) >= 2, what="stepping running")
        await memory.enqueue("blocking")
        await wait_until(lambda: worker.stats.lost >= 1, timeout=ttl + 5, what="a run fenced")
        await asyncio.sleep(0.3)  # six steps' time
    after = [at for attempt, at in steps if attempt == 1 and at > thawed[0]]
    assert after == [], "the run taken back took a step after the loop ran again"


async def test_a_run_whose_broker_says_its_delivery_is_gone_stops_at_once(
    queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a RabbitMQ delivery whose channel closed: its next extension says so, long
    before the reservation would have lapsed here."""
    broker = await synced(MemoryBroker(MemorySettings(queue_name, 60.0, visibility_timeout=3.0)))
    app, events = App(), []

    @app.job
    async def long(ctx: JobContext) -> None:
        events.append("start")
        await asyncio.sleep(2.5)
        events.append("end")

    async def gone(delivery: Delivery) -> None:
        raise DeliveryLostError("the channel it arrived on is closed")

    monkeypatch.setattr(broker, "extend", gone)
    async with running_worker(app, broker) as worker:
        await broker.enqueue("long")
        await wait_until(lambda: worker.stats.lost == 1, timeout=2.4, what="the run stopped")
    assert events == ["start"]
    assert worker.stats.succeeded == 0

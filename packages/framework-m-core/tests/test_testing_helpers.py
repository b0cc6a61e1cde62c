"""The helpers for testing an application's own jobs: run_job, drain, ticks_between."""

from __future__ import annotations

import asyncio
import sys
import threading
from datetime import UTC, datetime, timedelta

import pytest

from framework_m_core import App, ConfigurationError, JobContext
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.jobs import State
from framework_m_core.testing import drain, run_job, ticks_between
from framework_m_core.testing.scenarios import Processes, assert_each_slot_once

pytestmark = pytest.mark.anyio


async def test_run_job_gives_a_worker_s_context_and_returns_the_result() -> None:
    app = App(max_attempts=4)

    @app.on_startup
    def connect_db(state: State) -> None:
        state.db = {"ada": 36}

    @app.job
    async def age(ctx: JobContext, name: str) -> int:
        assert (ctx.attempt, ctx.max_attempts, ctx.job_name) == (2, 4, "age")
        await ctx.broker.enqueue("age", name="follow-up")
        return int(ctx.state.db[name])

    @app.job
    def blocking(ctx: JobContext) -> str:
        return threading.current_thread().name

    await app.startup()
    assert await run_job(app, "age", attempt=2, name="ada") == 36
    assert await run_job(app, "blocking") != threading.current_thread().name
    slot = datetime(2026, 1, 1, 9, tzinfo=UTC)

    @app.job
    async def report(ctx: JobContext) -> datetime | None:
        return ctx.scheduled_at

    assert await run_job(app, "report", scheduled_at=slot) == slot
    with pytest.raises(ConfigurationError, match="unknown job 'nope'"):
        await run_job(app, "nope")
    with pytest.raises(KeyError):  # the handler's own exception, as raised
        await run_job(app, "age", attempt=2, name="nobody")


async def test_drain_runs_until_idle_and_reports_every_outcome(memory: MemoryBroker) -> None:
    app = App(max_attempts=2, backoff=60)  # drain does not wait the backoff out

    @app.job
    async def flaky(ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("first try")

    @app.job
    async def broken(ctx: JobContext) -> None:
        raise ValueError("always")

    @app.job
    async def fan_out(ctx: JobContext, n: int) -> None:
        for i in range(n):
            await ctx.broker.enqueue("leaf", i=i)

    @app.job
    async def leaf(ctx: JobContext, i: int) -> None: ...

    await memory.enqueue("flaky")
    await memory.enqueue("broken")
    await memory.enqueue("fan_out", n=3)
    await memory.requeue(b"garbage")
    ran = await drain(app, memory, timeout=10)
    assert sorted(ran.names("succeeded")) == ["fan_out", "flaky", "leaf", "leaf", "leaf"]
    assert sorted(ran.names("retried")) == ["broken", "flaky"]
    assert sorted(ran.names("dead_lettered")) == ["-", "broken"]
    reasons = dict(zip(ran.names("dead_lettered"), [r for _, r in ran.dead_lettered], strict=True))
    assert "ValueError: always" in reasons["broken"]
    assert "undecodable" in reasons["-"]
    assert sorted(m.kwargs["i"] for m in ran.succeeded if m.job_name == "leaf") == [0, 1, 2]


async def test_drain_says_when_the_queue_never_idles(memory: MemoryBroker) -> None:
    app = App()

    @app.job
    async def forever(ctx: JobContext) -> None:
        await ctx.broker.enqueue("forever")

    await memory.enqueue("forever")
    with pytest.raises(TimeoutError, match=r"not idle after 0\.5s"):
        await drain(app, memory, timeout=0.5)


async def test_ticks_between_drives_the_ticker_through_a_dst_day_at_once() -> None:
    app = App()

    @app.job(schedule="30 2 * * *", tz="Europe/Berlin")
    async def nightly(ctx: JobContext) -> None: ...

    @app.job(every=timedelta(hours=6))
    async def quarterly(ctx: JobContext) -> None: ...

    start = datetime(2026, 3, 28, 12, tzinfo=UTC)
    ticks = await ticks_between(app, start, start + timedelta(days=2))
    nightly_slots = [t.slot for t in ticks if t.job_name == "nightly"]
    # 02:30 CET on the 28th+1 does not exist (the clocks jump to 03:00): 03:30 CEST, 01:30 UTC
    assert nightly_slots == [
        datetime(2026, 3, 29, 1, 30, tzinfo=UTC),
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC),
    ]
    assert len([t for t in ticks if t.job_name == "quarterly"]) == 9  # both ends count
    assert ticks[0].deduplication_id.startswith("tick:")
    with pytest.raises(ConfigurationError, match="aware"):
        await ticks_between(app, datetime(2026, 1, 1), datetime(2026, 1, 2))


async def test_ticks_between_into_a_broker_then_drain_runs_them(memory: MemoryBroker) -> None:
    app, slots = App(), []

    @app.job(every=3600, overlap="allow")  # the slots arrive together: let them overlap
    async def hourly(ctx: JobContext) -> None:
        slots.append(ctx.scheduled_at)

    start = datetime(2026, 6, 1, tzinfo=UTC)
    ticks = await ticks_between(app, start, start + timedelta(hours=3), broker=memory)
    ran = await drain(app, memory)
    assert ran.names("succeeded") == ["hourly"] * len(ticks) == ["hourly"] * 4
    assert ran.expired == []
    assert slots == [t.slot for t in ticks]


async def test_drain_reports_slots_skipped_while_their_schedules_run_was_running(
    memory: MemoryBroker,
) -> None:
    app = App()

    @app.job(every=3600)  # overlap="skip", the default
    async def hourly(ctx: JobContext) -> None:
        await asyncio.sleep(0.3)

    start = datetime(2026, 6, 1, tzinfo=UTC)
    ticks = await ticks_between(app, start, start + timedelta(hours=3), broker=memory)
    ran = await drain(app, memory)
    assert len(ran.succeeded) >= 1
    assert len(ran.skipped) >= 1  # they all arrive while the first one sleeps
    assert sorted(m.deduplication_id or "" for m in ran.succeeded + ran.skipped) == sorted(
        t.deduplication_id for t in ticks
    )
    assert ran.retried == []


def test_assert_each_slot_once_tells_a_redelivery_from_a_second_enqueue() -> None:
    # (slot, start, attempt)
    assert_each_slot_once([(10, 0, 1), (11, 0, 1), (11, 0, 2)], 10, 11, around=[11.5])
    assert_each_slot_once([(9, 0, 1), (9, 0, 2), (10, 0, 1)], 10, 10)  # warm-up redelivery
    with pytest.raises(AssertionError, match=r"run more than once: \[11\]"):
        assert_each_slot_once([(10, 0, 1), (11, 0, 1), (11, 0, 2)], 10, 11, around=[20])
    with pytest.raises(AssertionError, match=r"enqueued more than once: \[9\]"):
        assert_each_slot_once([(9, 0, 1), (9, 0, 1), (10, 0, 1)], 10, 10)
    with pytest.raises(AssertionError, match=r"never run between 10 and 12: \[11\]"):
        assert_each_slot_once([(10, 0, 1), (12, 0, 1)], 10, 12)
    assert_each_slot_once([(10, 0, 1), (12, 0, 1)], 10, 12, outage=(10.5, 11.5))


def test_a_failed_slot_check_names_its_context_and_what_the_workers_said() -> None:
    procs = Processes()
    try:
        said = procs.start(sys.executable, "-c", "print('12:00 WARNING framework_m.x: lost')")
        assert said.wait() == 0
        with pytest.raises(AssertionError) as failed:
            assert_each_slot_once([], 10, 10, workers=[said], context="killed 9.500")
    finally:
        procs.close()
    message = str(failed.value)
    assert "never run between 10 and 10: [10]" in message
    assert "first slot 10, killed 9.500" in message
    assert f"[{said.pid}] 12:00 WARNING framework_m.x: lost" in message

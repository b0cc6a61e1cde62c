"""A schedule's runtime state: pause, resume, the latest slot and triggers, on memory://."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from framework_m_core import App, JobContext, Ticker
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.control import keys, steering
from framework_m_core.control.shared import shared
from framework_m_core.control.steering import ScheduleState, decode_state
from framework_m_core.errors import ConfigurationError, InvalidJobError
from framework_m_core.ports import decode_message
from framework_m_core.scheduling.schedules import cron, every
from framework_m_core.testing import receive_all, received_slots, wait_until

pytestmark = pytest.mark.anyio
NOW = 1_700_000_000.0


async def test_a_schedule_nobody_changed_runs_and_knows_no_slot(memory: MemoryBroker) -> None:
    state = await steering.read(memory, "report")
    assert state == ScheduleState()
    assert not state.pauses(NOW)
    assert await shared(memory).read_state(keys.schedule("report")) is None  # reading wrote nothing


async def test_pause_holds_every_slot_until_resume(memory: MemoryBroker) -> None:
    state = await steering.pause(
        memory, "report", reason="incident 42", by="ana@web-1 (m schedules)", clock=lambda: NOW
    )
    assert (state.paused, state.paused_until, state.reason) == (True, None, "incident 42")
    assert state.paused_by == "ana@web-1 (m schedules)"
    assert state.paused_at == NOW
    read = await steering.read(memory, "report")
    assert read == state
    assert read.pauses(NOW + 10**6)
    assert not (await steering.read(memory, "other")).paused  # schedules are independent
    resumed = await steering.resume(memory, "report", clock=lambda: NOW + 5)
    assert resumed == ScheduleState(resumed_at=NOW + 5)
    assert not (await steering.read(memory, "report")).pauses(NOW)


async def test_a_pause_until_a_time_holds_only_the_slots_before_it(memory: MemoryBroker) -> None:
    await steering.pause(memory, "report", until=NOW + 60, clock=lambda: NOW)
    state = await steering.read(memory, "report")
    assert state.pauses(NOW + 59)
    assert not state.pauses(NOW + 60)


@pytest.mark.parametrize("until", [NOW, NOW - 1, float("nan"), float("inf")])
async def test_a_pause_that_would_end_in_the_past_is_refused(
    memory: MemoryBroker, until: float
) -> None:
    with pytest.raises(ConfigurationError, match="future"):
        await steering.pause(memory, "report", until=until, clock=lambda: NOW)
    assert await shared(memory).read_state(keys.schedule("report")) is None


@pytest.mark.parametrize("reason", ["x" * 201, "two\nlines", 5])
async def test_a_bad_reason_is_refused(memory: MemoryBroker, reason: object) -> None:
    with pytest.raises(ConfigurationError, match="reason"):
        await steering.pause(memory, "report", reason=reason)  # type: ignore[arg-type]


async def test_a_bad_job_name_is_refused(memory: MemoryBroker) -> None:
    with pytest.raises(InvalidJobError):
        await steering.pause(memory, "")


async def test_the_latest_slot_only_moves_forward(memory: MemoryBroker) -> None:
    assert (await steering.advance(memory, "report", 100)).latest_slot == 100
    assert (await steering.advance(memory, "report", 90)).latest_slot == 100
    assert (await steering.advance(memory, "report", 110)).latest_slot == 110
    await steering.pause(memory, "report")  # a pause keeps the slot
    assert (await steering.read(memory, "report")).latest_slot == 110
    await steering.resume(memory, "report")
    assert (await steering.read(memory, "report")).latest_slot == 110


async def test_changes_at_once_keep_each_other(memory: MemoryBroker) -> None:
    await asyncio.gather(
        *(steering.advance(memory, "report", slot) for slot in (5, 3, 9, 7, 1)),
        steering.pause(memory, "report", reason="r"),
    )
    state = await steering.read(memory, "report")
    assert (state.latest_slot, state.paused, state.reason) == (9, True, "r")


async def test_trigger_enqueues_one_run_now_with_a_dedup_id_of_its_own(
    memory: MemoryBroker,
) -> None:
    await steering.pause(memory, "report")
    first = await steering.trigger(memory, "report", {"day": 1}, clock=lambda: NOW + 0.5)
    second = await steering.trigger(memory, "report", clock=lambda: NOW + 0.5)
    assert first != second  # two triggers are two runs
    bodies = [decode_message(d.body) for d in await receive_all(memory)]
    assert [(m.kwargs, m.scheduled_at) for m in bodies] == [({"day": 1}, NOW), ({}, NOW)]
    ids = [m.deduplication_id for m in bodies]
    assert all(i is not None and i.startswith("trigger:report:") for i in ids)
    state = await steering.read(memory, "report")
    assert state.triggered_at == NOW + 0.5
    assert state.paused  # a trigger leaves the pause as it was


async def test_a_trigger_with_kwargs_that_are_not_json_sends_nothing(
    memory: MemoryBroker,
) -> None:
    with pytest.raises(InvalidJobError):
        await steering.trigger(memory, "report", {"when": object()})
    assert await receive_all(memory) == []


@pytest.mark.parametrize(
    "value",
    [
        b"not json",
        b"[1, 2]",
        b'{"paused": "yes", "latest_slot": 1.5, "reason": 7, "paused_until": -1}',
        b'{"latest_slot": true, "paused_at": 1e400}',
        b'{"reason": "two\\nlines"}',
    ],
)
def test_a_malformed_record_is_read_as_the_default_with_a_warning(
    value: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="framework_m"):
        assert decode_state(value, "report") == ScheduleState()
    assert any("report" in r.getMessage() for r in caplog.records)


def test_a_record_round_trips() -> None:
    state = ScheduleState(True, NOW + 5, NOW, "why", 1_699_999_990, NOW - 1)
    assert decode_state(state.encode()) == state
    assert decode_state(ScheduleState().encode()) == ScheduleState()


# -- the ticker obeys them --------------------------------------------------------------


def _every_second() -> App:
    app = App()

    @app.job(every=1)
    async def beat(ctx: JobContext) -> None: ...

    return app


async def test_the_ticker_enqueues_no_slot_of_a_paused_schedule_until_resumed(
    memory: MemoryBroker, caplog: pytest.LogCaptureFixture
) -> None:
    await steering.pause(memory, "beat", reason="maintenance")
    ticker = Ticker(_every_second().jobs.values(), memory, grace=2)
    task = asyncio.create_task(ticker.run())
    with caplog.at_level(logging.INFO, logger="framework_m"):
        await wait_until(lambda: ticker.stats.paused >= 3, timeout=10)
        assert ticker.stats.published == 0
        assert await received_slots(memory) == []
        resumed = time.time()
        await steering.resume(memory, "beat")
        await wait_until(lambda: ticker.stats.published >= 2, timeout=10)
    ticker.stop()
    await task
    slots = await received_slots(memory)
    assert slots, slots
    assert all(s >= int(resumed) - 2 for s in slots), (slots, resumed)  # late by grace at most
    assert len(set(slots)) == len(slots)
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name == "framework_m.ticker" and r.levelno >= logging.INFO
    ]
    assert sum("paused (maintenance)" in line for line in lines) == 1, lines  # logged once
    assert any("not paused any more" in line for line in lines)
    state = await steering.read(memory, "beat")
    assert state.latest_slot == min(slots)  # the first after resume; the next in a minute


async def test_the_ticker_records_the_latest_slot_each_slot_with_catch_up_else_each_minute(
    memory: MemoryBroker,
) -> None:
    app = _every_second()

    @app.job(every=1, catchup_window=60)
    async def kept(ctx: JobContext) -> None: ...

    ticker = Ticker(app.jobs.values(), memory, grace=2)
    task = asyncio.create_task(ticker.run())
    await wait_until(lambda: ticker.stats.published >= 6, timeout=10)
    ticker.stop()
    await task
    by_job: dict[str, list[int]] = {"beat": [], "kept": []}
    for d in await receive_all(memory, quiet=0.2):
        message = decode_message(d.body)
        assert message.scheduled_at is not None
        by_job[message.job_name].append(message.scheduled_at)
    assert len(by_job["beat"]) >= 2
    assert (await steering.read(memory, "kept")).latest_slot == max(by_job["kept"])
    assert (await steering.read(memory, "beat")).latest_slot == min(by_job["beat"])


# -- backfill ---------------------------------------------------------------------------


async def test_backfill_enqueues_each_slot_of_the_range_once_and_records_the_latest(
    memory: MemoryBroker,
) -> None:
    sched = cron("*/15 * * * *")  # 00, 15, 30, 45
    start, end = NOW - 3600, NOW - 1800  # 1_699_996_400 .. 1_699_998_200
    await steering.advance(memory, "report", int(NOW))  # a later slot is kept as the latest
    done = await steering.backfill(memory, "report", sched, start, end, clock=lambda: NOW)
    expected = sched.slots_between(start - 1, end)
    assert [slot for slot, _, _ in done.slots] == expected
    assert all(s % 900 == 0 for s in expected)
    assert len(expected) == 2
    assert done.stored == 2
    assert await received_slots(memory) == expected
    assert (await steering.read(memory, "report")).latest_slot == int(NOW)
    again = await steering.backfill(memory, "report", sched, start, end, clock=lambda: NOW)
    assert again.stored == 0  # the broker still remembers each slot
    assert await received_slots(memory) == []
    fresh = await steering.backfill(memory, "other", sched, start, end, clock=lambda: NOW)
    assert (await steering.read(memory, "other")).latest_slot == expected[-1] == fresh.slots[-1][0]


async def test_a_range_ending_on_a_slot_includes_it(memory: MemoryBroker) -> None:
    done = await steering.backfill(memory, "beat", every(60), 1_699_999_920, 1_699_999_980)
    assert [slot for slot, _, _ in done.slots] == [1_699_999_920, 1_699_999_980]


@pytest.mark.parametrize(
    ("start", "end", "why"),
    [
        (NOW - 10, NOW + 10, "end in the past"),
        (NOW - 10, NOW - 20, "start before it ends"),
        (NOW - 2000, NOW - 1, "more than 1000 slots"),
        (float("nan"), NOW - 1, "two unix times"),
    ],
)
async def test_a_bad_backfill_range_is_refused_and_enqueues_nothing(
    memory: MemoryBroker, start: float, end: float, why: str
) -> None:
    with pytest.raises(ConfigurationError, match=why):
        await steering.backfill(memory, "beat", every(1), start, end, clock=lambda: NOW)
    assert await received_slots(memory) == []
    assert await shared(memory).read_state(keys.schedule("beat")) is None


async def test_a_running_ticker_obeys_a_pause_at_its_next_tick(memory: MemoryBroker) -> None:
    ticker = Ticker(_every_second().jobs.values(), memory, grace=2)
    task = asyncio.create_task(ticker.run())
    await wait_until(lambda: ticker.stats.published >= 2, timeout=10)  # states read, kept
    await steering.pause(memory, "beat", reason="now")
    paused = time.time()
    await wait_until(lambda: ticker.stats.paused >= 2, timeout=10)
    ticker.stop()
    await task
    late = [s for s in await received_slots(memory) if s > paused]
    assert late == [], f"slots after the pause were enqueued: {late}"

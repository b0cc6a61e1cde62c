"""Schedule handles: ``report.schedule(broker)`` and ``ScheduleHandle(broker, "@id")``
steer and describe one schedule of the fleet, on memory://."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from framework_m_core import App, JobContext, ScheduleHandle
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.control import keys, runtime_schedules
from framework_m_core.control.shared import shared
from framework_m_core.errors import ConfigurationError, InvalidJobError
from framework_m_core.ports import decode_message
from framework_m_core.testing import receive_all

pytestmark = pytest.mark.anyio

app = App()


@app.job(every=60)
async def report(ctx: JobContext, region: str = "eu") -> None: ...


@app.job
async def unscheduled(ctx: JobContext) -> None: ...


async def test_pause_describe_and_resume_through_the_handle(memory: MemoryBroker) -> None:
    handle = report.schedule(memory)
    until = datetime.now(UTC) + timedelta(hours=1)
    paused = await handle.pause(until=until, reason="incident 7")
    assert (paused.paused, paused.reason) == (True, "incident 7")
    assert paused.paused_until == pytest.approx(until.timestamp())
    described = await handle.describe()
    assert (described.name, described.state, list(described.running)) == ("report", paused, [])
    resumed = await handle.resume()
    assert not resumed.paused
    assert not (await handle.describe()).state.paused


async def test_describe_names_the_runs_going_on(memory: MemoryBroker) -> None:
    assert await shared(memory).acquire_lease(keys.overlap("report"), "job-1@host:1", 30)
    assert (await report.schedule(memory).describe()).running == ["job-1@host:1"]


async def test_a_trigger_is_checked_against_the_handler_then_enqueued(
    memory: MemoryBroker,
) -> None:
    handle = report.schedule(memory)
    with pytest.raises(InvalidJobError, match="nosuch"):
        await handle.trigger(nosuch=1)
    assert await receive_all(memory, quiet=0.1) == []  # nothing was sent
    job = await handle.trigger(region="us")
    assert (await job.status()).job_name == "report"
    [delivery] = await receive_all(memory, quiet=0.2)
    message = decode_message(delivery.body)
    assert (message.id, message.job_name, message.kwargs) == (job, "report", {"region": "us"})
    assert (await handle.describe()).state.triggered_at is not None


async def test_a_backfill_enqueues_each_past_slot_once(memory: MemoryBroker) -> None:
    handle = report.schedule(memory)
    end = (int(time.time()) // 60 - 1) * 60  # a whole minute in the past
    first = await handle.backfill(end - 120, end)
    assert [slot for slot, _, _ in first.slots] == [end - 120, end - 60, end]
    assert first.stored == 3
    again = await handle.backfill(datetime.fromtimestamp(end - 120, UTC), end)
    assert again.stored == 0  # every slot a duplicate of the first backfill's


async def test_a_runtime_schedule_is_steered_by_its_id(memory: MemoryBroker) -> None:
    await runtime_schedules.set_schedule(
        memory,
        runtime_schedules.runtime_schedule(
            "nightly", "report", every_seconds=60, kwargs={"region": "ap"}
        ),
    )
    handle = ScheduleHandle(memory, "@nightly")
    assert (await handle.pause()).paused
    job = await handle.trigger()
    [delivery] = await receive_all(memory, quiet=0.2)
    assert decode_message(delivery.body).kwargs == {"region": "ap"}
    assert (await job.status()).job_name == "report"


async def test_wrong_input_is_refused_before_anything_is_written(memory: MemoryBroker) -> None:
    with pytest.raises(ConfigurationError, match="no schedule"):
        unscheduled.schedule(memory)
    handle = report.schedule(memory)
    with pytest.raises(ConfigurationError, match="zone"):
        await handle.pause(until=datetime.now() + timedelta(hours=1))
    with pytest.raises(ConfigurationError, match="unix seconds"):
        await handle.backfill(float("nan"), 0)
    assert await shared(memory).read_state(keys.schedule("report")) is None
    memory.capabilities = frozenset()
    with pytest.raises(ConfigurationError, match="keeps no shared state"):
        await handle.pause()

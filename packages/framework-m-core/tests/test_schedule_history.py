"""A schedule's history: each settled delivery of its job, with slot, replica and
outcome, newest first and bounded; other jobs write none."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from framework_m_core import App, JobContext
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.control import history, keys
from framework_m_core.control.history import record_runs, schedule_history
from framework_m_core.control.settled import SettledRun
from framework_m_core.control.shared import shared
from framework_m_core.ports import JobMessage
from framework_m_core.testing import running_worker, wait_until

pytestmark = pytest.mark.anyio


def _tick(job: str, slot: int) -> JobMessage:
    return JobMessage(job, scheduled_at=slot, deduplication_id=f"tick:{job}:{slot}")


async def test_each_settled_slot_is_kept_with_its_replica_and_outcome(
    memory: MemoryBroker,
) -> None:
    app = App(backoff=0.01)
    release = asyncio.Event()

    @app.job(every=3600)  # overlap="skip"
    async def report(ctx: JobContext) -> str:
        if ctx.scheduled_at is not None and ctx.scheduled_at.timestamp() == 3600:
            await release.wait()
        return "ok"

    @app.job(every=3600, max_attempts=2)
    async def broken(ctx: JobContext) -> None:
        raise ValueError("no disk")

    @app.job
    async def plain(ctx: JobContext) -> None:
        return None

    async with running_worker(app, memory) as worker:
        await memory.publish(_tick("report", 3600))
        await wait_until(lambda: worker.stats.received == 1)
        await memory.publish(_tick("report", 7200))  # skipped: 3600 still runs
        await wait_until(lambda: worker.stats.skipped == 1)
        release.set()
        await memory.publish(_tick("broken", 3600))
        await memory.enqueue("plain")
        await wait_until(lambda: worker.stats.dead_lettered == 1 and worker.stats.succeeded == 2)
    assert worker.heartbeat is not None  # its stop waited for the history writes
    replica = worker.heartbeat.id

    runs = await schedule_history(memory, "report")
    assert [(r.slot, r.outcome) for r in runs] == [(3600, "succeeded"), (7200, "skipped")]
    assert {r.replica for r in runs} == {replica}
    ran, skipped = runs
    assert ran.duration is not None
    assert ran.duration >= 0
    assert ran.attempt == 1
    assert skipped.started_at is None
    assert skipped.duration is None
    assert skipped.error is not None
    assert "still running" in skipped.error

    failed = await schedule_history(memory, "broken")
    assert [(r.attempt, r.outcome) for r in failed] == [(2, "dead_lettered"), (1, "retried")]
    assert failed[0].error is not None
    assert "ValueError: no disk" in failed[0].error
    assert await schedule_history(memory, "plain") == []


def _run(finished_at: float, slot: int = 60) -> SettledRun:
    return SettledRun(
        "id", "s", "host:1:ab", 1, "succeeded", finished_at - 1, finished_at, None, slot
    )


async def test_a_history_keeps_the_latest_runs_and_none_past_its_age(memory: MemoryBroker) -> None:
    now = time.time()
    assert await record_runs(memory, "s", [_run(now - history.MAX_AGE - 10, slot=1)])
    for n in range(history.MOST + 5):
        assert await record_runs(memory, "s", [_run(now - 1000 + n, slot=100 + n)])
    assert await record_runs(memory, "t", [_run(now - history.MAX_AGE - 10, slot=1)])
    assert await record_runs(memory, "t", [_run(now, slot=2)])
    assert [r.slot for r in await schedule_history(memory, "t")] == [2]
    runs = await schedule_history(memory, "s")
    assert len(runs) == history.MOST
    assert [r.slot for r in runs] == [100 + n for n in range(history.MOST + 4, 4, -1)]


async def test_a_record_not_written_here_is_read_as_far_as_it_is_valid(
    memory: MemoryBroker, caplog: pytest.LogCaptureFixture
) -> None:
    now = time.time()
    good = {
        "slot": 60,
        "job_id": "a",
        "job": "s",
        "replica": "r",
        "attempt": 1,
        "outcome": "succeeded",
        "started_at": now - 1,
        "finished_at": now,
        "error": None,
    }
    bad = [{**good, "outcome": "exploded"}, {**good, "attempt": True}, "text", None]
    value = json.dumps({"v": 1, "runs": [good, *bad]}).encode()
    await shared(memory).write_state(keys.history("s"), value, version=None)
    assert [r.job_id for r in await schedule_history(memory, "s")] == ["a"]
    assert "4 malformed entries left out" in caplog.text
    await shared(memory).write_state(keys.history("t"), b"[1, 2]", version=None)
    assert await schedule_history(memory, "t") == []
    assert "is not what a worker writes" in caplog.text

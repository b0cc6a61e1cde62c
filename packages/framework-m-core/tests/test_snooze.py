"""raise Snooze(seconds): the same job runs again later, no attempt used, bounded."""

from __future__ import annotations

import itertools
import time
from datetime import timedelta

import pytest

from framework_m_core import App, JobContext, JobDefinitionError, Snooze
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.control.jobs import job_status
from framework_m_core.ports.messages import JobMessage, snoozed, snoozes_of
from framework_m_core.ports.statuses import JobState
from framework_m_core.testing import running_worker, wait_until

pytestmark = pytest.mark.anyio


async def test_a_snoozed_job_runs_again_later_as_the_same_job_without_an_attempt(
    memory: MemoryBroker,
) -> None:
    app = App()
    runs: list[tuple[str, int, float]] = []

    @app.job(max_attempts=1)
    async def call_api(ctx: JobContext) -> str:
        runs.append((ctx.job_id, ctx.attempt, time.monotonic()))
        if len(runs) < 3:
            raise Snooze(0.3)
        return "done"

    job_id = await memory.enqueue("call_api")
    async with running_worker(app, memory) as worker:
        await wait_until(lambda: worker.stats.snoozed == 1, what="the first snooze")
        status = await job_status(memory, job_id)
        assert status.state is JobState.SCHEDULED
        assert status.error == "snoozed for 0.3s (1 of max_snoozes=20)"
        await wait_until(lambda: worker.stats.succeeded == 1, timeout=10, what="the last run")
    assert [(i, attempt) for i, attempt, _ in runs] == [(job_id, 1)] * 3
    assert all(b[2] - a[2] >= 0.3 for a, b in itertools.pairwise(runs))
    assert (worker.stats.snoozed, worker.stats.retried, worker.stats.dead_lettered) == (2, 0, 0)
    done = await job_status(memory, job_id)
    assert done.state is JobState.SUCCEEDED
    assert done.result == "done"


async def test_a_job_snoozing_past_its_max_snoozes_fails_an_attempt(memory: MemoryBroker) -> None:
    app = App(backoff=0.05)
    runs: list[int] = []

    @app.job(max_snoozes=2, max_attempts=2)
    async def sleepy(ctx: JobContext) -> None:
        runs.append(ctx.attempt)
        raise Snooze(timedelta(seconds=0))

    job_id = await memory.enqueue("sleepy")
    async with running_worker(app, memory) as worker:
        await wait_until(lambda: worker.stats.dead_lettered == 1, timeout=10, what="its end")
    assert runs == [1, 1, 1, 2]  # two snoozes, then the third counts: attempts 1 and 2
    assert (worker.stats.snoozed, worker.stats.retried) == (2, 1)
    status = await job_status(memory, job_id)
    assert status.state is JobState.FAILED
    assert status.error is not None
    assert "snoozed 2 times, its max_snoozes, and asked for 0s more" in status.error


def test_a_snoozed_copy_is_the_same_job_due_later_with_a_deduplication_id_of_its_own() -> None:
    tick = JobMessage("report", id="abc", deduplication_id="tick:report:60", not_after=65.0)
    copy = snoozed(tick, 30.0)
    assert (copy.id, copy.scheduled_at, copy.job_name) == ("abc", None, "report")
    assert copy.deduplication_id == "snooze:abc:1"
    assert copy.not_after is None
    assert copy.not_before is not None
    assert copy.not_before >= time.time() + 29
    assert snoozes_of(copy) == 1
    assert snoozes_of(snoozed(copy, 0)) == 2
    assert snoozed(copy, 0).deduplication_id == "snooze:abc:2"


@pytest.mark.parametrize("seconds", [-1, float("nan"), float("inf"), 86_401, "5", True])
def test_a_bad_snooze_is_refused_saying_why(seconds: object) -> None:
    with pytest.raises(ValueError, match="a snooze lasts 0 to 86400 seconds"):
        Snooze(seconds)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, 10_001, 1.5, True])
def test_a_bad_max_snoozes_is_refused_at_import(bad: object) -> None:
    app = App()
    with pytest.raises(JobDefinitionError, match="max_snoozes must be an integer from 0"):

        @app.job(max_snoozes=bad)  # type: ignore[arg-type]
        async def job(ctx: JobContext) -> None: ...

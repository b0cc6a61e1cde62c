"""Contract tests of cancelling jobs: what ``cancel_job`` promises, asked on another
connection than the worker's, on this adapter."""

from __future__ import annotations

import time

import pytest

from ...control.jobs import cancel_job, job_status, wait_result
from ...errors import JobCancelledError
from ...ports.capabilities import Capability
from ...ports.messages import new_job_id
from ...ports.statuses import JobState
from ..helpers import BrokerFactory, many, running_worker, wait_until
from .base import ContractBase
from .requirements import requires
from .status import jobs_app, state_is


class CancelContract(ContractBase):
    """A cancelled job never runs, or stops within seconds where it runs; not retried."""

    @requires(Capability.STORE, Capability.STORE, Capability.DELAYED_ENQUEUE)
    async def test_a_waiting_job_cancelled_never_runs(self, broker_factory: BrokerFactory) -> None:
        app = jobs_app()
        async with many(broker_factory, 2) as (worker_side, asker):
            delayed = await asker.enqueue_in(2, "counted")
            queued = await asker.enqueue("counted")
            assert await cancel_job(asker, delayed) is True
            assert await cancel_job(asker, queued) is True
            for job_id in (delayed, queued):  # says so at once, before any worker
                assert (await job_status(asker, job_id)).state is JobState.CANCELLED
            async with running_worker(app, worker_side) as worker:
                await wait_until(lambda: worker.stats.cancelled >= 2, timeout=20)
            with pytest.raises(JobCancelledError):
                await wait_result(asker, delayed, timeout=1)
            status = await job_status(asker, queued)
        assert app.state.ran == []
        assert status.state is JobState.CANCELLED
        assert worker.stats.succeeded == 0

    @requires(Capability.STORE, Capability.STORE)
    async def test_a_running_job_is_stopped_within_seconds_and_not_retried(
        self, broker_factory: BrokerFactory
    ) -> None:
        app = jobs_app()
        async with many(broker_factory, 2) as (worker_side, asker):
            jobs = [await asker.enqueue("long"), await asker.enqueue("plain_long")]
            async with running_worker(app, worker_side) as worker:
                for job_id in jobs:
                    await wait_until(
                        lambda j=job_id: state_is(asker, j, JobState.RUNNING),  # type: ignore[misc]
                        timeout=20,
                    )
                asked = time.monotonic()
                assert [await cancel_job(asker, j) for j in jobs] == [True, True]
                await wait_until(lambda: worker.stats.cancelled >= 2, timeout=10)
                took = time.monotonic() - asked
            statuses = [await job_status(asker, j) for j in jobs]
        assert took < 5, f"stopped {took:.1f}s after the cancel (2 s promised)"
        assert sorted(app.state.ran) == ["saw the flag", "stopped"]
        assert [s.state for s in statuses] == [JobState.CANCELLED] * 2
        assert [s.attempts for s in statuses] == [1, 1]
        assert (worker.stats.retried, worker.stats.succeeded) == (0, 0)

    @requires(Capability.STORE, Capability.STORE)
    async def test_a_finished_or_unknown_job_is_not_cancelled(
        self, broker_factory: BrokerFactory
    ) -> None:
        app = jobs_app()
        async with many(broker_factory, 2) as (worker_side, asker):
            job_id = await asker.enqueue("add", a=1, b=2)
            async with running_worker(app, worker_side):
                assert await wait_result(asker, job_id, timeout=20) == 3
            assert await cancel_job(asker, job_id) is False
            assert await cancel_job(asker, new_job_id()) is False
            assert (await job_status(asker, job_id)).state is JobState.SUCCEEDED

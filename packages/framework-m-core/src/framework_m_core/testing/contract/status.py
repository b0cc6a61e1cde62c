"""Contract tests of job statuses and results: what ``job_status`` and ``wait_result``
promise, asked on another connection than the worker's, on this adapter."""

from __future__ import annotations

import asyncio
import time

import pytest

from ...app import App
from ...control import keys
from ...control.jobs import job_status, wait_result
from ...control.shared import shared
from ...errors import JobFailedError, ResultTimeoutError, UnknownJobError
from ...jobs import JobContext
from ...ports.capabilities import Capability
from ...ports.messages import JobMessage, new_job_id
from ...ports.statuses import MAX_RESULT, JobState, JobStatus, encode_status
from ..helpers import BrokerFactory, many, running_worker, wait_until
from .base import ContractBase
from .requirements import requires


def jobs_app() -> App:
    app = App()
    ran: list[str] = []
    app.state.ran = ran

    @app.job
    async def add(ctx: JobContext, a: int, b: int) -> int:
        return a + b

    @app.job(max_attempts=1)
    async def breaks(ctx: JobContext) -> None:
        raise ValueError("broken on purpose")

    @app.job(max_attempts=1)
    async def too_big(ctx: JobContext) -> str:
        return "x" * (MAX_RESULT + 1)

    @app.job(keep_result=0)
    async def quiet(ctx: JobContext) -> int:
        return 1

    @app.job
    async def slow(ctx: JobContext) -> str:
        await asyncio.sleep(2)
        return "slept"

    _cancellable(app, ran)
    return app


def _cancellable(app: App, ran: list[str]) -> None:
    """Jobs to cancel: one that sleeps, one that polls ``ctx.cancelled``, one that counts."""

    @app.job(max_attempts=3)
    async def long(ctx: JobContext) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            ran.append("stopped")
            raise

    @app.job(max_attempts=3)
    def plain_long(ctx: JobContext) -> None:
        deadline = time.monotonic() + 30
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.02)
        ran.append("saw the flag" if ctx.cancelled else "ran out")

    @app.job
    async def counted(ctx: JobContext) -> None:
        ran.append("counted")


class StatusContract(ContractBase):
    """A job id leads to its status and its result, from any connection."""

    @requires(Capability.STORE)
    async def test_a_result_and_its_status_are_read_on_another_connection(
        self, broker_factory: BrokerFactory
    ) -> None:
        app = jobs_app()
        async with many(broker_factory, 2) as (worker_side, asker):
            job_id = await asker.enqueue("add", a=2, b=3)
            queued = await job_status(asker, job_id)
            assert (queued.state, queued.job_name, queued.attempts) == (JobState.QUEUED, "add", 0)
            async with running_worker(app, worker_side):
                assert await wait_result(asker, job_id, timeout=20) == 5
            status = await job_status(asker, job_id)
        assert status.state is JobState.SUCCEEDED
        assert (status.result, status.has_result, status.attempts) == (5, True, 1)
        assert status.enqueued_at is not None
        assert status.started_at is not None
        assert status.finished_at is not None
        assert status.enqueued_at <= status.started_at <= status.finished_at

    @requires(Capability.STORE)
    async def test_an_enqueue_never_overwrites_a_later_status(
        self, broker_factory: BrokerFactory
    ) -> None:
        # A worker may finish a job before its enqueue's status lands (an enqueue that
        # writes it after the store): the enqueue's record must not replace the end.
        async with many(broker_factory, 1) as (broker,):
            job_id, now = new_job_id(), time.time()
            done = JobStatus(job_id, JobState.SUCCEEDED, "add", 1, enqueued_at=now, finished_at=now)
            await shared(broker).put_memo(keys.status(job_id), encode_status(done), ttl=60)
            message = JobMessage("add", {"a": 1, "b": 2}, id=job_id, enqueued_at=now)
            assert (await broker.publish(message)).job_id == job_id
            status = await job_status(broker, job_id)
        assert (status.state, status.attempts) == (JobState.SUCCEEDED, 1)

    @requires(Capability.STORE)
    async def test_a_failed_job_raises_its_error_and_says_failed(
        self, broker_factory: BrokerFactory
    ) -> None:
        app = jobs_app()
        async with many(broker_factory, 2) as (worker_side, asker):
            failing = await asker.enqueue("breaks")
            oversized = await asker.enqueue("too_big")
            async with running_worker(app, worker_side):
                with pytest.raises(JobFailedError) as failed:
                    await wait_result(asker, failing, timeout=20)
                with pytest.raises(JobFailedError) as refused:
                    await wait_result(asker, oversized, timeout=20)
            status = await job_status(asker, failing)
        assert "ValueError: broken on purpose" in (failed.value.error or "")
        assert status.state is JobState.FAILED
        assert status.attempts == 1
        assert "broken on purpose" in (status.error or "")
        assert f"more than the {MAX_RESULT:,} kept" in (refused.value.error or "")

    @requires(Capability.STORE)
    async def test_a_running_job_says_so_and_a_wait_times_out_apart(
        self, broker_factory: BrokerFactory
    ) -> None:
        app = jobs_app()
        async with many(broker_factory, 2) as (worker_side, asker):
            job_id = await asker.enqueue("slow")
            async with running_worker(app, worker_side):
                await wait_until(
                    lambda: state_is(asker, job_id, JobState.RUNNING),
                    timeout=20,
                    what="the running status",
                )
                with pytest.raises(ResultTimeoutError) as late:
                    await wait_result(asker, job_id, timeout=0.2)
                assert isinstance(late.value, TimeoutError)
                assert await wait_result(asker, job_id, timeout=20) == "slept"

    @requires(Capability.STORE, Capability.DELAYED_ENQUEUE)
    async def test_a_delayed_job_says_scheduled_with_its_due_time(
        self, broker_factory: BrokerFactory
    ) -> None:
        async with many(broker_factory, 2) as (enqueuer, asker):
            job_id = await enqueuer.enqueue_in(60, "add", a=1, b=1)
            status = await job_status(asker, job_id)
        assert status.state is JobState.SCHEDULED
        assert status.due_at is not None
        assert status.enqueued_at is not None
        assert 59 <= status.due_at - status.enqueued_at <= 61

    @requires(Capability.STORE)
    async def test_an_id_never_enqueued_is_unknown(self, broker_factory: BrokerFactory) -> None:
        async with many(broker_factory, 1) as (asker,):
            job_id = new_job_id()
            assert (await job_status(asker, job_id)).state is JobState.UNKNOWN
            with pytest.raises(UnknownJobError):
                await wait_result(asker, job_id, timeout=5)

    @requires(Capability.STORE)
    async def test_a_job_keeping_nothing_writes_no_status(
        self, broker_factory: BrokerFactory
    ) -> None:
        app = jobs_app()
        handle = app.jobs["quiet"]
        async with many(broker_factory, 2) as (worker_side, asker):
            by_handle = await _handle_of(app, "quiet").enqueue(asker)
            by_name = await asker.enqueue("quiet")
            assert (await job_status(asker, by_handle)).state is JobState.UNKNOWN
            async with running_worker(app, worker_side) as worker:
                await wait_until(lambda: worker.stats.succeeded >= 2, timeout=20)
            assert (await job_status(asker, by_handle)).state is JobState.UNKNOWN
            closed = await job_status(asker, by_name)  # its enqueue made a record: closed
        assert handle.keep_result == 0
        assert closed.state is JobState.SUCCEEDED
        assert not closed.has_result


def _handle_of(app: App, name: str):  # type: ignore[no-untyped-def]
    from ...handles import JobHandle

    spec = app.jobs[name]
    return JobHandle(spec, spec.handler)


async def state_is(broker, job_id: str, state: JobState) -> bool:  # type: ignore[no-untyped-def]
    return (await job_status(broker, job_id)).state is state

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import anyio
import pytest

from framework_m_core import (
    App,
    BrokerError,
    Delivery,
    DeliveryLostError,
    JobContext,
    JobMessage,
    PublishResult,
    SchemaConflictError,
    SchemaMissingError,
    Ticker,
    Worker,
    WorkerFailedError,
)
from framework_m_core.adapters.memory import MemoryBroker, MemorySettings
from framework_m_core.ports.schema import SchemaPlan
from framework_m_core.testing import drain, receive_all, running_worker, synced, wait_until

pytestmark = pytest.mark.anyio


def start(worker: Worker) -> asyncio.Task[None]:
    return asyncio.create_task(worker.run())


async def test_ctx_carries_scheduled_at_for_ticked_jobs_only(memory: MemoryBroker) -> None:
    app = App()
    seen: dict[str, datetime | None] = {}

    @app.job
    async def job(ctx: JobContext, tag: str) -> None:
        seen[tag] = ctx.scheduled_at

    await memory.publish(JobMessage("job", {"tag": "ticked"}, scheduled_at=1_700_000_000))
    await memory.enqueue("job", tag="plain")
    async with running_worker(app, memory, fetch_timeout=0.1):
        await wait_until(lambda: len(seen) == 2)
    assert seen == {"ticked": datetime.fromtimestamp(1_700_000_000, UTC), "plain": None}
    ticked = seen["ticked"]
    assert ticked is not None
    assert ticked.tzinfo is UTC


async def test_concurrency_limit_holds(memory: MemoryBroker) -> None:
    app = App()
    running = 0
    peak = 0
    release = asyncio.Event()

    @app.job
    async def hold(ctx: JobContext) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1

    for _ in range(10):
        await memory.enqueue("hold")
    async with running_worker(app, memory, concurrency=3, fetch_timeout=0.1) as worker:
        await wait_until(lambda: running == 3)
        await asyncio.sleep(0.3)  # room for a fourth job to start if the limit leaked
        assert peak == 3
        release.set()
        await wait_until(lambda: worker.stats.succeeded == 10)
    assert peak == 3


async def test_graceful_stop_lets_running_jobs_finish(memory: MemoryBroker) -> None:
    app = App()
    started = asyncio.Event()
    finished: list[str] = []

    @app.job
    async def slow(ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(0.5)
        finished.append(ctx.job_id)

    job_id = await memory.enqueue("slow")
    worker = Worker(app, memory, shutdown_timeout=5, fetch_timeout=0.1)
    task = start(worker)
    await started.wait()
    worker.stop()
    await task
    assert finished == [job_id]
    assert worker.stats.succeeded == 1
    assert await memory.receive(10, 0.2) == []


async def test_jobs_past_the_shutdown_deadline_are_released(memory: MemoryBroker) -> None:
    app = App()
    started = asyncio.Event()

    @app.job
    async def stuck(ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(60)

    job_id = await memory.enqueue("stuck")
    worker = Worker(app, memory, shutdown_timeout=0.2, fetch_timeout=0.1)
    task = start(worker)
    await started.wait()
    t0 = time.monotonic()
    worker.stop()
    await task
    assert time.monotonic() - t0 < 2
    assert worker.stats.released == 1
    [again] = await memory.receive(10, 1)
    assert again.attempt == 1  # a release is not an attempt
    assert job_id.encode() in again.body


async def test_abort_releases_running_jobs_at_once(memory: MemoryBroker) -> None:
    app = App()
    started = asyncio.Event()

    @app.job
    async def stuck(ctx: JobContext) -> None:
        started.set()
        await asyncio.sleep(60)

    await memory.enqueue("stuck")
    worker = Worker(app, memory, shutdown_timeout=60, fetch_timeout=0.1)
    task = start(worker)
    await started.wait()
    worker.stop()
    await asyncio.sleep(0.1)
    worker.abort()
    await asyncio.wait_for(task, 2)
    assert worker.stats.released == 1
    assert len(await memory.receive(10, 1)) == 1


async def test_abort_cuts_a_long_receive_short(memory: MemoryBroker) -> None:
    worker = Worker(App(), memory, fetch_timeout=30)
    task = start(worker)
    await wait_until(lambda: worker._receiving is not None, what="a receive in progress")
    started = time.monotonic()
    worker.abort()
    await asyncio.wait_for(task, 10)
    assert time.monotonic() - started < 1.0
    assert worker._receiving is None


async def test_kwargs_that_do_not_fit_the_handler_are_dead_lettered(
    memory: MemoryBroker,
) -> None:
    app = App()
    calls = 0

    @app.job
    async def needs_to(ctx: JobContext, to: str) -> None:
        nonlocal calls
        calls += 1

    await memory.enqueue("needs_to", too="typo")
    ran = await drain(app, memory)
    assert calls == 0
    assert ran.names("dead_lettered") == ["needs_to"]
    assert "kwargs do not match handler of 'needs_to'" in ran.dead_lettered[0][1]
    [dead] = await memory.dead_letters()
    assert "kwargs do not match handler of 'needs_to'" in dead.reason


async def test_heartbeat_keeps_a_long_job_from_being_delivered_twice(queue_name: str) -> None:
    broker = await synced(MemoryBroker(MemorySettings(queue_name, visibility_timeout=0.3)))
    app = App()
    runs = 0

    @app.job
    async def long(ctx: JobContext) -> None:
        nonlocal runs
        runs += 1
        await asyncio.sleep(1.2)

    await broker.enqueue("long")
    workers = [Worker(app, broker, concurrency=1, fetch_timeout=0.1) for _ in range(2)]
    tasks = [start(w) for w in workers]
    await wait_until(lambda: sum(w.stats.succeeded for w in workers) == 1)
    for w in workers:
        w.stop()
    await asyncio.gather(*tasks)
    assert runs == 1


async def test_receive_errors_are_survived(queue_name: str) -> None:
    failures = 2

    class Flaky(MemoryBroker):
        async def receive(self, max_messages: int, timeout: float) -> Sequence[Delivery]:
            nonlocal failures
            if failures:
                failures -= 1
                raise BrokerError("connection reset")
            return await super().receive(max_messages, timeout)

    broker = await synced(Flaky(MemorySettings(queue_name)))
    app = App()

    @app.job
    async def job(ctx: JobContext) -> None: ...

    await broker.enqueue("job")
    async with running_worker(app, broker, fetch_timeout=0.1) as worker:
        await wait_until(lambda: worker.stats.succeeded == 1)
    assert failures == 0


async def test_ticker_and_worker_run_each_slot_once(memory: MemoryBroker) -> None:
    app = App()
    slots: list[datetime | None] = []

    @app.job(every=1)
    async def beat(ctx: JobContext) -> None:
        slots.append(ctx.scheduled_at)

    ticker = Ticker(app.jobs.values(), memory, grace=2)
    async with running_worker(app, memory, ticker=ticker, fetch_timeout=0.1):
        await wait_until(lambda: len(slots) >= 3, timeout=8)
    stamps = [int(s.timestamp()) for s in slots if s is not None]
    assert len(stamps) == len(slots)
    assert stamps == list(range(stamps[0], stamps[0] + len(stamps)))
    assert await receive_all(memory, quiet=0.2) == []


async def test_progress_is_logged(memory: MemoryBroker, caplog: pytest.LogCaptureFixture) -> None:
    app = App()

    @app.job
    async def job(ctx: JobContext) -> None: ...

    await memory.enqueue("job")
    with caplog.at_level(logging.INFO, "framework_m.worker"):
        async with running_worker(app, memory, fetch_timeout=0.1, progress_interval=0.2) as w:
            await wait_until(lambda: "progress: 1 succeeded" in caplog.text)
    assert w.stats.succeeded == 1


async def test_a_job_whose_workers_keep_dying_is_dead_lettered(queue_name: str) -> None:
    broker = await synced(MemoryBroker(MemorySettings(queue_name, visibility_timeout=0.2)))
    app = App()
    calls = 0

    @app.job(max_attempts=2)
    async def crashy(ctx: JobContext) -> None:
        nonlocal calls
        calls += 1

    await broker.enqueue("crashy")
    for _ in range(2):  # two workers take it and vanish without settling it
        assert len(await broker.receive(1, 2)) == 1
    async with running_worker(app, broker, fetch_timeout=0.1) as worker:
        await wait_until(lambda: worker.stats.dead_lettered == 1)
    assert calls == 0
    [dead] = await broker.dead_letters()
    assert "delivered 3 times, more than max_attempts=2" in dead.reason


async def test_an_ack_that_fails_is_retried_not_given_up(queue_name: str) -> None:
    failures = 2

    class Flaky(MemoryBroker):
        async def ack(self, delivery: Delivery) -> None:
            nonlocal failures
            if failures:
                failures -= 1
                raise BrokerError("connection reset")
            await super().ack(delivery)

    broker = await synced(Flaky(MemorySettings(queue_name, visibility_timeout=5)))
    app = App()
    runs = 0

    @app.job
    async def job(ctx: JobContext) -> None:
        nonlocal runs
        runs += 1

    await broker.enqueue("job")
    async with running_worker(app, broker, fetch_timeout=0.1) as worker:
        await wait_until(lambda: worker.stats.succeeded == 1)
    assert failures == 0
    assert runs == 1
    assert await broker.receive(10, 0.2) == []


async def test_an_ack_of_a_lost_delivery_is_given_up_at_once(queue_name: str) -> None:
    """A delivery whose reservation died with its connection comes back by itself:
    retrying its ack until the visibility timeout would only hold a concurrency slot."""
    acks = 0

    class Lost(MemoryBroker):
        async def ack(self, delivery: Delivery) -> None:
            nonlocal acks
            acks += 1
            raise DeliveryLostError("its channel is closed")

    broker = await synced(Lost(MemorySettings(queue_name, visibility_timeout=3600)))
    app = App()

    @app.job
    async def job(ctx: JobContext) -> None:
        pass

    await broker.enqueue("job")
    async with running_worker(app, broker, fetch_timeout=0.1) as worker:
        await wait_until(lambda: acks >= 1)
        await wait_until(lambda: not worker._inflight, timeout=2)  # not held for retries
    assert acks == 1
    assert worker.stats.succeeded == 0


class _CrashingTicker:
    """A ticker whose task dies after ``after`` seconds."""

    def __init__(self, after: float) -> None:
        self.after = after
        self.stopped = asyncio.Event()

    def check(self) -> None: ...

    async def run(self) -> None:
        await asyncio.sleep(self.after)
        raise RuntimeError("injected ticker failure")

    def stop(self) -> None:
        self.stopped.set()


async def test_a_ticker_that_dies_stops_the_worker_at_once_and_says_why(
    memory: MemoryBroker, caplog: pytest.LogCaptureFixture
) -> None:
    worker = Worker(App(), memory, ticker=_CrashingTicker(0.3), fetch_timeout=30)
    started = time.monotonic()
    with pytest.raises(WorkerFailedError, match="the ticker died: RuntimeError: injected"):
        async with asyncio.timeout(10):
            await worker.run()
    assert time.monotonic() - started < 0.3 + 1.0  # the 30 s receive was cut short
    [record] = [r for r in caplog.records if "ticker died" in r.getMessage()]
    assert record.exc_info is not None
    assert "injected ticker failure" in caplog.text


async def _cancelled_mid_job(memory: MemoryBroker, cancel: str) -> tuple[list[str], Delivery]:
    """Run a worker on one endless job, cancel ``run()`` (from asyncio or anyio); return what
    the handler saw and the job's next delivery."""
    app = App()
    seen: list[str] = []
    started = asyncio.Event()

    @app.job
    async def endless(ctx: JobContext) -> None:
        seen.append("started")
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    await memory.enqueue("endless")
    worker = Worker(app, memory, shutdown_timeout=60, fetch_timeout=0.1)
    if cancel == "asyncio":
        task = asyncio.create_task(worker.run())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    else:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                await started.wait()
                scope.cancel()
    [again] = await memory.receive(10, 1)
    return seen, again


@pytest.mark.parametrize("cancel", ["asyncio", "anyio"])
async def test_cancelling_run_cancels_handlers_and_releases_their_jobs(
    memory: MemoryBroker, cancel: str
) -> None:
    seen, again = await _cancelled_mid_job(memory, cancel)
    assert seen == ["started", "cancelled"]
    assert again.attempt == 1  # released, not left to expire


async def test_a_failed_attempt_logs_its_traceback_once_and_the_last_one_at_error(
    memory: MemoryBroker, caplog: pytest.LogCaptureFixture
) -> None:
    app = App(backoff=0.05)

    @app.job(max_attempts=2)
    async def broken(ctx: JobContext) -> None:
        {}["missing"]

    job_id = await memory.enqueue("broken")
    async with running_worker(app, memory) as worker:
        await wait_until(lambda: worker.stats.dead_lettered == 1)
    failures = [
        r for r in caplog.records if r.name == "framework_m.job" and "Traceback" in r.msg % r.args
    ]
    assert [(r.levelname, job_id in r.getMessage()) for r in failures] == [
        ("WARNING", True),
        ("ERROR", True),
    ]
    assert all("KeyError: 'missing'" in r.getMessage() for r in failures)
    assert caplog.text.count('{}["missing"]') == 2  # the traceback, once per attempt


async def test_a_huge_exception_message_is_logged_bounded(
    memory: MemoryBroker, caplog: pytest.LogCaptureFixture
) -> None:
    app = App()

    @app.job(max_attempts=1)
    async def broken(ctx: JobContext) -> None:
        raise ValueError("x" * 1_000_000 + "\n" + "line\n" * 100_000)

    await memory.enqueue("broken")
    async with running_worker(app, memory) as worker:
        await wait_until(lambda: worker.stats.dead_lettered == 1)
    [record] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert "ValueError: xxx" in record.getMessage()
    assert "(1,000,012 characters)" in record.getMessage()
    assert "raise ValueError" in record.getMessage()  # the frames come before the cut
    assert len(caplog.text) < 40_000


async def test_schema_warnings_are_logged_at_start(
    queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    class Capped(MemoryBroker):
        async def plan_schema(self) -> SchemaPlan:
            plan = await super().plan_schema()
            return SchemaPlan(plan.changes, ("the queue is capped: jobs may be dropped",))

    async with Capped(MemorySettings(queue_name)) as broker:
        await Worker(App(), broker).prepare()
    [record] = [r for r in caplog.records if "capped" in r.getMessage()]
    assert (record.levelname, record.getMessage()) == (
        "WARNING",
        "schema: the queue is capped: jobs may be dropped",
    )


async def test_without_schema_sync_a_schema_that_differs_is_refused_with_the_plan(
    queue_name: str,
) -> None:
    async with MemoryBroker(MemorySettings(queue_name)) as broker:
        with pytest.raises(SchemaConflictError, match="run `m sync-schema` first") as raised:
            await Worker(App(), broker, sync_schema=False).prepare()
        assert f"create queue memory://{queue_name}" in str(raised.value)
        assert not (await broker.plan_schema()).in_sync  # nothing was changed
        await broker.sync_schema()  # the pre-deploy step
        await Worker(App(), broker, sync_schema=False).prepare()


@pytest.mark.parametrize("may_sync", [True, False])
async def test_a_schema_gone_is_synced_again_when_the_worker_may(
    queue_name: str, caplog: pytest.LogCaptureFixture, may_sync: bool
) -> None:
    class Forgetful(MemoryBroker):
        gone = False
        syncs = raised = 0

        async def receive(self, max_messages: int, timeout: float) -> Sequence[Delivery]:
            if self.gone:
                self.raised += 1
                raise SchemaMissingError("consumer group workers does not exist")
            return await super().receive(max_messages, timeout)

        async def sync_schema(self, *, dry_run: bool = False) -> SchemaPlan:
            self.syncs += 1
            self.gone = False
            return await super().sync_schema(dry_run=dry_run)

    broker = await synced(Forgetful(MemorySettings(queue_name)))
    app = App()

    @app.job
    async def job(ctx: JobContext) -> None: ...

    async with running_worker(app, broker, fetch_timeout=0.1, sync_schema=may_sync) as worker:
        await wait_until(lambda: worker.readiness()[0])
        before = broker.syncs
        broker.gone = True
        await wait_until(lambda: broker.raised >= 1, timeout=5)
        await broker.enqueue("job")
        if may_sync:
            await wait_until(lambda: worker.stats.succeeded == 1)
            assert (broker.syncs, broker.raised) == (before + 1, 1)
            assert worker.readiness()[0]
        else:
            raised = broker.raised
            await wait_until(lambda: broker.raised > raised + 1, timeout=10)  # asked again
            assert "forbids creating it" in caplog.text
            assert not worker.readiness()[0]
            assert (broker.syncs, worker.stats.succeeded) == (before, 0)
    says = "the broker's schema is gone (consumer group workers does not exist): syncing it again"
    assert (says in caplog.text) is may_sync


async def test_a_broker_that_answers_no_publish_makes_a_ticking_worker_unready(
    queue_name: str,
) -> None:
    class Quorumless(MemoryBroker):
        storing = True

        async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
            if not self.storing:
                await asyncio.Event().wait()  # accepted, never confirmed
            return await super()._publish(message, body)

    broker = await synced(Quorumless(MemorySettings(queue_name, dedup_window=30)))
    app = App()

    @app.job(every=1)
    async def beat(ctx: JobContext) -> None: ...

    ticker = Ticker(app.jobs.values(), broker, grace=0.5)
    async with running_worker(app, broker, ticker=ticker) as worker:
        await wait_until(lambda: ticker.stats.published >= 1, timeout=5)
        assert worker.readiness() == (True, "ok")
        broker.storing = False
        await wait_until(lambda: not worker.readiness()[0], timeout=5)
        assert "the broker answers no publish since" in worker.readiness()[1]
        broker.storing = True
        await wait_until(lambda: worker.readiness()[0], timeout=5)

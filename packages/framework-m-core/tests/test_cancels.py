"""The worker's cancel watch: it ends when it is cancelled, whatever its broker raises;
runs read their marks only when a cancel may have named them. A status says cancelled
only of a job stopped or never run."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Sequence
from typing import TypeVar

import pytest

from framework_m_core.adapters.memory import MemoryBroker, MemorySettings
from framework_m_core.control.jobs import cancel_job, job_status
from framework_m_core.control.keys import cancel_mark
from framework_m_core.control.keys import memo as memo_key
from framework_m_core.control.keys import status as status_key
from framework_m_core.control.shared import shared
from framework_m_core.errors import BrokerError
from framework_m_core.observability.observer import Observer
from framework_m_core.ports.messages import decode_message
from framework_m_core.ports.statuses import (
    LATEST_CANCEL,
    JobState,
    JobStatus,
    decode_latest_cancel,
    encode_status,
)
from framework_m_core.ports.store import ANY, Record, Write
from framework_m_core.runtime.cancels import MARGIN, Cancellation, CancelWatch
from framework_m_core.testing import synced, wait_until
from framework_m_core.testing.passing import DeafStore, PassingStore

pytestmark = pytest.mark.anyio


class _SwallowingStore(PassingStore):
    """A store whose client turns a cancelled watch into an error of its own."""

    waits = 0

    async def watch(self, key: str, version: int | None, *, timeout: float) -> Record | None:
        self.waits += 1
        try:
            return await super().watch(key, version, timeout=timeout)
        except asyncio.CancelledError:
            raise BrokerError("request cut short") from None


class _CountingStore(PassingStore):
    """Counts reads of cancel marks and of the latest cancel's memo."""

    mark_reads = 0
    latest_reads = 0
    waits = 0

    async def read(self, keys: Sequence[str]) -> list[Record | None]:
        for key in keys:
            if key.startswith(memo_key(cancel_mark(""))):
                self.mark_reads += 1
            if key == memo_key(LATEST_CANCEL):
                self.latest_reads += 1
        return await super().read(keys)

    async def watch(self, key: str, version: int | None, *, timeout: float) -> Record | None:
        self.waits += 1
        return await super().watch(key, version, timeout=timeout)


S = TypeVar("S", bound=PassingStore)


async def _broker(queue_name: str, spy: type[S]) -> tuple[MemoryBroker, S]:
    """memory:// whose store calls go through ``spy`` first."""
    broker = await synced(MemoryBroker(MemorySettings(queue_name, 120.0, 5.0)))
    broker._store = store = spy(broker._store)  # type: ignore[assignment]
    return broker, store


async def test_a_watch_stops_when_cancelled_though_its_broker_swallows_it(
    queue_name: str,
) -> None:
    broker, store = await _broker(queue_name, _SwallowingStore)
    watch = CancelWatch(broker, Observer())
    assert await watch.start("job-1", Cancellation(), time.time())
    task = asyncio.create_task(watch.run())
    await wait_until(lambda: store.waits >= 1, timeout=5)
    task.cancel()
    async with asyncio.timeout(5):
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_closed_watch_ends_though_its_broker_ate_the_cancellation(
    queue_name: str,
) -> None:
    broker, _ = await _broker(queue_name, DeafStore)
    watch = CancelWatch(broker, Observer())
    assert await watch.start("job-1", Cancellation(), time.time())
    task = asyncio.create_task(watch.run())
    await asyncio.sleep(0.2)  # inside its first wait
    watch.close()
    task.cancel()
    async with asyncio.timeout(5):
        await asyncio.gather(task, return_exceptions=True)
    assert task.done()


async def test_runs_registering_at_once_share_one_read_and_read_no_mark_without_cancels(
    queue_name: str,
) -> None:
    broker, store = await _broker(queue_name, _CountingStore)
    watch = CancelWatch(broker, Observer())
    now = time.time()
    started = await asyncio.gather(
        *(watch.start(f"job-{n}", Cancellation(), now) for n in range(50))
    )
    assert all(started)
    assert (store.latest_reads, store.mark_reads) == (1, 0)
    assert await watch.start("job-next", Cancellation(), now)  # a later pass: a read of its own
    assert store.latest_reads == 2


@contextlib.asynccontextmanager
async def _watching(watch: CancelWatch, store: _CountingStore) -> AsyncIterator[None]:
    """``watch`` running, from its first wait on until the block ends."""
    task = asyncio.create_task(watch.run())
    try:
        await wait_until(lambda: store.waits >= 1, timeout=5, what="the watch waiting")
        yield
    finally:
        watch.close()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_runs_starting_while_the_watch_waits_read_nothing_and_a_cancel_still_stops(
    queue_name: str,
) -> None:
    broker, store = await _broker(queue_name, _CountingStore)
    watch = CancelWatch(broker, Observer())
    job_id = await broker.enqueue("counted")
    [delivery] = await broker.receive(1, 1)
    enqueued_at = decode_message(delivery.body).enqueued_at
    assert await watch.start("first", Cancellation(), time.time())
    async with _watching(watch, store):
        reads = (store.latest_reads, store.mark_reads)
        for n in range(20):  # each in a pass of its own: no read at all
            assert await watch.start(f"job-{n}", Cancellation(), time.time())
            await asyncio.sleep(0)
        assert (store.latest_reads, store.mark_reads) == reads
        # a cancel the watch has not learned of yet: the run starts, then is stopped
        assert await cancel_job(broker, job_id)
        running = Cancellation()
        started = await watch.start(job_id, running, enqueued_at)
        await wait_until(lambda: not started or running.requested, timeout=5, what="a stop")
        # once the watch learned of it, a run of a job it may name reads its mark
        await wait_until(lambda: store.latest_reads > reads[0], timeout=5, what="time read")
        assert not await watch.start(job_id, Cancellation(), enqueued_at)


async def test_the_watch_stays_under_way_a_wait_after_runs_a_moment_apart(
    queue_name: str,
) -> None:
    broker, store = await _broker(queue_name, _CountingStore)
    watch = CancelWatch(broker, Observer())
    assert await watch.start("first", Cancellation(), time.time())
    async with _watching(watch, store):
        watch.end("first")
        assert await watch.start("second", Cancellation(), time.time())  # during the wait
        watch.end("second")
        await wait_until(lambda: store.waits >= 2, timeout=5, what="a second wait")
        reads = store.latest_reads
        assert await watch.start("third", Cancellation(), time.time())  # none registered
        assert store.latest_reads == reads  # between, the watch still waited: no read


async def test_a_run_reads_its_mark_when_a_cancel_may_have_named_it(queue_name: str) -> None:
    broker, store = await _broker(queue_name, _CountingStore)
    watch = CancelWatch(broker, Observer())
    job_id = await broker.enqueue("counted")
    [delivery] = await broker.receive(1, 1)
    enqueued_at = decode_message(delivery.body).enqueued_at
    assert await cancel_job(broker, job_id)  # keeps the latest cancel's time
    before = store.mark_reads
    assert not await watch.start(job_id, Cancellation(), enqueued_at)
    assert store.mark_reads == before + 1
    later = time.time() + MARGIN + 1  # a job enqueued long after the latest cancel
    assert await watch.start("job-later", Cancellation(), later)
    assert store.mark_reads == before + 1  # not read: no cancel can name it


async def test_a_latest_cancel_memo_it_cannot_read_makes_every_run_read_its_mark(
    queue_name: str,
) -> None:
    broker, store = await _broker(queue_name, _CountingStore)
    assert await shared(broker).put_memo(LATEST_CANCEL, b"not a time", ttl=60)
    watch = CancelWatch(broker, Observer())
    assert await watch.start("job-1", Cancellation(), time.time() + 10 * MARGIN)
    assert store.mark_reads == 1
    for junk in (b"x", b"nan", b"inf", b"\xff"):
        assert decode_latest_cancel(junk) == math.inf
    assert decode_latest_cancel(b"12.5") == 12.5
    assert decode_latest_cancel(None) is None


class _FinishingStore(PassingStore):
    """Its first read of a job status is answered as it was, and the job then ends at
    once (a run that started as the cancel came and finished before the cancel's
    writes)."""

    finish: tuple[str, bytes] | None = None

    async def read(self, keys: Sequence[str]) -> list[Record | None]:
        found = await super().read(keys)
        if self.finish is not None and self.finish[0] in keys:
            key, value = self.finish
            self.finish = None
            await self.write([Write(key, value, ANY, ttl=60)])
        return found


async def test_a_job_that_ran_as_its_cancel_came_keeps_the_status_it_ended_with(
    queue_name: str,
) -> None:
    broker, store = await _broker(queue_name, _FinishingStore)
    job_id = await broker.enqueue("quick")
    assert (await job_status(broker, job_id)).state is JobState.QUEUED
    done = JobStatus(job_id, JobState.SUCCEEDED, job_name="quick", finished_at=time.time())
    store.finish = (memo_key(status_key(job_id)), encode_status(done))
    assert await cancel_job(broker, job_id)  # it saw the job queued
    assert (await job_status(broker, job_id)).state is JobState.SUCCEEDED


async def test_a_waiting_job_cancelled_says_so_until_a_worker_settles_it(
    queue_name: str,
) -> None:
    broker, _ = await _broker(queue_name, PassingStore)
    job_id = await broker.enqueue("quick")
    assert await cancel_job(broker, job_id)
    cancelled = await job_status(broker, job_id)
    assert (cancelled.state, cancelled.error) == (JobState.CANCELLED, "cancelled by request")
    assert cancelled.finished_at is not None
    assert abs(cancelled.finished_at - time.time()) < 60

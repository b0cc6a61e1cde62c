"""What a worker writes of its jobs' statuses: a run that ends within RUNNING_AFTER
goes straight from queued to how it ended (one write); a longer one says running first,
and a running status still being written when the run ends lands before the final one."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest

from framework_m_core import App, JobContext
from framework_m_core.adapters.memory import MemoryBroker, MemorySettings
from framework_m_core.control.jobs import cancel_job, job_status
from framework_m_core.control.keys import memo, status
from framework_m_core.ports.messages import decode_message
from framework_m_core.ports.records import Delivery
from framework_m_core.ports.statuses import JobState, decode_status
from framework_m_core.ports.store import StoreProtocol, Write
from framework_m_core.runtime.statuses import RUNNING_AFTER
from framework_m_core.testing import running_worker, synced, wait_until
from framework_m_core.testing.passing import PassingStore

pytestmark = pytest.mark.anyio


class _RecordingStore(PassingStore):
    """Keeps the states of the status memos stored, in the order they landed; a running
    status takes 0.3 s to land (a slow broker)."""

    def __init__(self, inner: StoreProtocol) -> None:
        super().__init__(inner)
        self.puts: list[tuple[str, JobState]] = []
        self.sent: list[int] = []  # statuses in each send

    async def write(self, writes: Sequence[Write]) -> list[int | None]:
        states = await self._states(writes)
        stored = await super().write(writes)
        self._note(writes, states, stored)
        return stored

    async def send(self, writes: Sequence[Write]) -> None:
        states = await self._states(writes)
        self.sent.append(len(states))
        await super().send(writes)
        self._note(writes, states, [1] * len(writes))

    async def _states(self, writes: Sequence[Write]) -> dict[str, JobState]:
        states = {
            w.key: decode_status(w.key[len(_PREFIX) :], w.value).state
            for w in writes
            if w.key.startswith(_PREFIX) and w.value is not None
        }
        if JobState.RUNNING in states.values():
            await asyncio.sleep(0.3)
        return states

    def _note(
        self, writes: Sequence[Write], states: dict[str, JobState], stored: list[int | None]
    ) -> None:
        for w, version in zip(writes, stored, strict=True):
            if w.key in states and version is not None:
                self.puts.append((w.key[len(_PREFIX) :], states[w.key]))


_PREFIX = memo(status(""))


class _Recording(MemoryBroker):
    """memory:// whose status memos are recorded as they land (:class:`_RecordingStore`)."""

    memos_in_publish = False  # the enqueue's create goes beside the publish

    def __init__(self, settings: MemorySettings) -> None:
        super().__init__(settings)
        self.recorder = _RecordingStore(self._store)
        self._store = self.recorder  # type: ignore[assignment]

    @property
    def puts(self) -> list[tuple[str, JobState]]:
        return self.recorder.puts


def _app(started: asyncio.Event) -> App:
    app = App()

    @app.job
    async def quick(ctx: JobContext) -> None:
        for _ in range(3):  # gives the running-status sweep its turns
            await asyncio.sleep(0)

    @app.job
    async def lasting(ctx: JobContext) -> None:  # ends while its running status is written
        started.set()
        await asyncio.sleep(RUNNING_AFTER * 2)

    return app


async def test_a_quick_run_writes_its_end_only_and_a_long_one_says_running_first(
    queue_name: str,
) -> None:
    broker = await synced(_Recording(MemorySettings(queue_name, 120.0, 5.0)))
    started = asyncio.Event()
    app = _app(started)
    quick = [await broker.enqueue("quick") for _ in range(20)]
    lasting = await broker.enqueue("lasting")
    async with running_worker(app, broker, heartbeat=0) as worker:
        await wait_until(lambda: worker.stats.succeeded == 21, timeout=10)
    assert broker.puts, "no status written"
    for job_id in quick:  # the enqueue's queued, then the end: no running between
        assert [s for j, s in broker.puts if j == job_id] == [JobState.QUEUED, JobState.SUCCEEDED]
    assert [s for j, s in broker.puts if j == lasting] == [
        JobState.QUEUED,
        JobState.RUNNING,
        JobState.SUCCEEDED,
    ]


async def test_the_statuses_of_runs_ending_in_one_pass_go_in_one_send(queue_name: str) -> None:
    broker = await synced(_Recording(MemorySettings(queue_name, 120.0, 5.0)))
    app = _app(asyncio.Event())
    for _ in range(20):
        await broker.enqueue("quick")
    async with running_worker(app, broker, heartbeat=0, concurrency=20) as worker:
        await wait_until(lambda: worker.stats.succeeded == 20, timeout=10)
    assert sum(broker.recorder.sent) == 20
    assert max(broker.recorder.sent) > 1, broker.recorder.sent  # runs of a pass share one
    assert len(broker.recorder.sent) < 20


async def test_runs_going_on_say_running_each_started_apart(queue_name: str) -> None:
    broker = await synced(MemoryBroker(MemorySettings(queue_name, 120.0, 5.0)))
    app = App()
    release = asyncio.Event()

    @app.job
    async def long(ctx: JobContext, i: int) -> None:
        await release.wait()

    async with running_worker(app, broker, heartbeat=0) as worker:
        ids = []
        for i in range(3):  # each starts while the ones before it wait for their note
            ids.append(await broker.enqueue("long", i=i))
            await asyncio.sleep(RUNNING_AFTER / 3)

        async def states() -> list[JobState]:
            return [(await job_status(broker, job_id)).state for job_id in ids]

        async def all_running() -> bool:
            return await states() == [JobState.RUNNING] * 3

        await wait_until(all_running, what="three runs saying running")
        release.set()
        await wait_until(lambda: worker.stats.succeeded == 3)
    assert await states() == [JobState.SUCCEEDED] * 3


async def test_an_enqueue_beside_its_status_create_returns_once_both_landed(
    queue_name: str,
) -> None:
    broker = await synced(_Recording(MemorySettings(queue_name, 120.0, 5.0)))
    job_id = await broker.enqueue("quick")  # no deduplication id: created beside the publish
    assert broker.puts == [(job_id, JobState.QUEUED)]
    assert (await job_status(broker, job_id)).state is JobState.QUEUED


async def test_a_dedup_enqueue_creates_its_status_beside_the_publish_and_a_duplicate_none(
    queue_name: str,
) -> None:
    broker = await synced(_Recording(MemorySettings(queue_name, 120.0, 5.0)))
    job_id = await broker.enqueue("quick", deduplication_id="once")
    assert broker.puts == [(job_id, JobState.QUEUED)]
    assert await broker.enqueue("quick", deduplication_id="once") == job_id
    assert len(broker.puts) == 2  # the duplicate's was created while it was published
    duplicate = broker.puts[1][0]
    assert duplicate != job_id
    assert (await job_status(broker, duplicate)).state is JobState.UNKNOWN  # deleted again
    assert (await job_status(broker, job_id)).state is JobState.QUEUED


class _LosingAcks(MemoryBroker):
    """The first ack of each job never reaches it (a lost connection, a partition): the
    job comes back after the visibility timeout."""

    def __init__(self, settings: MemorySettings) -> None:
        super().__init__(settings)
        self.lost: set[str] = set()

    async def ack(self, delivery: Delivery) -> None:
        job_id = decode_message(delivery.body).id
        if job_id not in self.lost:
            self.lost.add(job_id)
            return
        await super().ack(delivery)


async def test_a_job_whose_ack_was_lost_is_acked_not_run_again(
    queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    broker = await synced(_LosingAcks(MemorySettings(queue_name, 120.0, 0.3)))
    app = App()
    runs: list[tuple[str, int]] = []

    @app.job
    async def once(ctx: JobContext) -> None:
        runs.append(("once", ctx.attempt))

    @app.job(backoff=0.01)
    async def flaky(ctx: JobContext) -> None:
        runs.append(("flaky", ctx.attempt))
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")

    once_id, flaky_id = await broker.enqueue("once"), await broker.enqueue("flaky")
    with caplog.at_level(logging.INFO, logger="framework_m"):
        async with running_worker(app, broker, heartbeat=0) as worker:
            await wait_until(lambda: worker.stats.already_finished == 2, timeout=10)
            assert worker.stats.succeeded == 2
    [stopped] = [m for m in caplog.messages if m.startswith("worker stopped:")]
    assert "2 already finished" in stopped, stopped
    # A retried attempt is no finished one: flaky's second attempt ran.
    assert sorted(runs) == [("flaky", 1), ("flaky", 2), ("once", 1)]
    for job_id, attempts in ((once_id, 1), (flaky_id, 2)):
        status = await job_status(broker, job_id)
        assert (status.state, status.attempts) == (JobState.SUCCEEDED, attempts)
    assert await broker.receive(1, 0.5) == []  # the redeliveries were acked


class _FirstExtendsLost(MemoryBroker):
    """A first delivery's extensions never reach it (a network blip): a long job comes
    back to the worker that still runs it."""

    def __init__(self, settings: MemorySettings) -> None:
        super().__init__(settings)
        self.attempts: list[int] = []

    async def receive(self, max_messages: int, timeout: float) -> Sequence[Delivery]:
        got = await super().receive(max_messages, timeout)
        self.attempts += [d.attempt for d in got]
        return got

    async def extend(self, delivery: Delivery) -> None:
        if delivery.attempt > 1:
            await super().extend(delivery)


async def test_a_job_delivered_again_while_it_runs_here_waits_and_runs_once(
    queue_name: str,
) -> None:
    broker = await synced(_FirstExtendsLost(MemorySettings(queue_name, 120.0, 0.3)))
    app = App()
    runs: list[int] = []

    @app.job
    async def lasting(ctx: JobContext) -> None:
        runs.append(ctx.attempt)
        await asyncio.sleep(1.0)  # the reservation lapses meanwhile: delivered again

    job_id = await broker.enqueue("lasting")
    async with running_worker(app, broker, heartbeat=0) as worker:
        await wait_until(lambda: worker.stats.already_finished == 1, timeout=10)
    assert runs == [1]
    assert broker.attempts == [1, 2]  # the second was kept reserved while it waited
    status = await job_status(broker, job_id)
    assert (status.state, status.attempts) == (JobState.SUCCEEDED, 1)


async def test_a_delivery_waiting_for_its_run_here_takes_no_place_of_the_worker(
    queue_name: str,
) -> None:
    broker = await synced(_FirstExtendsLost(MemorySettings(queue_name, 120.0, 0.3)))
    app = App()
    other_ran = asyncio.Event()
    ended: list[str] = []

    @app.job
    async def lasting(ctx: JobContext) -> None:
        try:  # runs until the other job ran, which needs a place while its redelivery waits
            async with asyncio.timeout(5):
                await other_ran.wait()
            ended.append("after the other job")
        except TimeoutError:
            ended.append("timed out")

    @app.job
    async def other(ctx: JobContext) -> None:
        other_ran.set()

    await broker.enqueue("lasting")
    async with running_worker(app, broker, heartbeat=0, concurrency=2) as worker:
        await wait_until(lambda: broker.attempts == [1, 2], timeout=10)
        await wait_until(lambda: worker.stats.waiting == 1, timeout=10)
        await broker.enqueue("other")
        await wait_until(lambda: worker.stats.already_finished == 1, timeout=10)
        assert worker.stats.waiting == 0
    assert ended == ["after the other job"]


async def test_a_job_cancelled_while_waiting_to_retry_counts_as_cancelled(
    queue_name: str,
) -> None:
    broker = await synced(MemoryBroker(MemorySettings(queue_name, 120.0, 5.0)))
    app = App()
    runs: list[int] = []

    @app.job(backoff=1.0)
    async def fails_once(ctx: JobContext) -> None:
        runs.append(ctx.attempt)
        raise RuntimeError("first attempt fails")

    job_id = await broker.enqueue("fails_once")
    async with running_worker(app, broker, heartbeat=0) as worker:
        await wait_until(lambda: worker.stats.retried == 1, timeout=10)
        assert await cancel_job(broker, job_id) is True  # its status: cancelled
        await wait_until(lambda: worker.stats.cancelled == 1, timeout=10)
        assert worker.stats.already_finished == 0
    assert runs == [1]


async def test_ids_of_any_allowed_length_have_their_own_status_and_cancel_mark(
    queue_name: str,
) -> None:
    broker = await synced(MemoryBroker(MemorySettings(queue_name, 120.0, 5.0)))
    longest, other = "a" * 200, "a" * 199 + "b"  # ids from outside may be 200 characters
    assert status(longest) != status(other)
    assert len(memo(status(longest))) <= 200 + len(memo(""))
    assert (await job_status(broker, longest)).state is JobState.UNKNOWN
    assert await cancel_job(broker, longest) is False  # unknown: nothing to cancel
    await broker.close()

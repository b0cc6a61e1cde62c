"""overlap= and concurrency= in one process, on memory:// (the contract suite's process
area runs them across real worker processes on every broker)."""

from __future__ import annotations

import asyncio
import time

import pytest

from framework_m_core import App, JobContext, JobDefinitionError
from framework_m_core.adapters.memory import MemoryBroker, MemorySettings
from framework_m_core.control import keys
from framework_m_core.control.shared import shared
from framework_m_core.errors import ConfigurationError
from framework_m_core.ports import Capability, Delivery, JobMessage
from framework_m_core.ports.messages import CAUGHT_UP
from framework_m_core.testing import running_worker, wait_until

pytestmark = pytest.mark.anyio


def _tick(job: str, slot: int) -> JobMessage:
    return JobMessage(job, scheduled_at=slot, deduplication_id=f"tick:{job}:{slot}")


class _Spans:
    """Start and end times of runs, to tell whether two ever overlapped."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float, object]] = []
        self.running = 0
        self.most = 0

    async def run(self, what: object, seconds: float) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        start = time.monotonic()
        try:
            await asyncio.sleep(seconds)
        finally:
            self.running -= 1
            self.spans.append((start, time.monotonic(), what))


async def test_a_slot_coming_while_the_previous_run_runs_is_skipped(memory: MemoryBroker) -> None:
    app, spans = App(), _Spans()

    @app.job(every=3600)  # overlap="skip", the default
    async def report(ctx: JobContext) -> None:
        await spans.run(ctx.scheduled_at, 0.6)

    async with running_worker(app, memory) as worker:
        await memory.publish(_tick("report", 3600))
        await wait_until(lambda: spans.running == 1, what="the first run")
        await memory.publish(_tick("report", 7200))
        await wait_until(lambda: worker.stats.skipped == 1, what="the skip")
        assert spans.running == 1
        await wait_until(lambda: worker.stats.succeeded == 1, what="the first run's end")
        await memory.publish(_tick("report", 10800))  # nothing runs now: it runs
        await wait_until(lambda: worker.stats.succeeded == 2, what="the third run")
    assert [when.timestamp() for _, _, when in spans.spans] == [3600, 10800]  # type: ignore[attr-defined]
    assert worker.stats.retried == 0
    assert list(await shared(memory).lease_holders("overlap:report")) == []  # released


async def test_a_run_gives_its_overlap_lease_back_before_its_ack_lands(
    memory: MemoryBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, ran = App(), []

    @app.job(every=3600)  # overlap="skip": an instant job, the next slot must not skip
    async def report(ctx: JobContext) -> None:
        assert ctx.scheduled_at is not None
        ran.append(ctx.scheduled_at.timestamp())

    acks_may_land = asyncio.Event()
    ack = memory.ack

    async def slow_ack(delivery: Delivery) -> None:
        await acks_may_land.wait()
        await ack(delivery)

    monkeypatch.setattr(memory, "ack", slow_ack)

    async def lease_free() -> bool:
        return await shared(memory).lease_holders(keys.overlap("report")) == []

    async with running_worker(app, memory) as worker:
        await memory.publish(_tick("report", 3600))
        await wait_until(lambda: ran == [3600], what="the first run")
        await wait_until(lease_free, what="the lease given back while the ack is pending")
        await memory.publish(_tick("report", 7200))
        await wait_until(lambda: len(ran) == 2 or worker.stats.skipped > 0, what="slot 7200")
        assert (ran, worker.stats.skipped) == ([3600, 7200], 0)
        acks_may_land.set()
        await wait_until(lambda: worker.stats.succeeded == 2, what="both acks")


async def test_slots_caught_up_late_wait_their_turn_and_all_run(memory: MemoryBroker) -> None:
    app, spans = App(), _Spans()

    @app.job(every=3600)  # overlap="skip", the default
    async def report(ctx: JobContext) -> None:
        await spans.run(ctx.scheduled_at, 0.2)

    async with running_worker(app, memory) as worker:
        for slot in (3600, 7200, 10800):  # as catch-up enqueues missed slots: at once
            late = _tick("report", slot)
            late.meta[CAUGHT_UP] = "1"
            await memory.publish(late)
        await wait_until(lambda: worker.stats.succeeded == 3, what="every missed slot run")
        assert worker.stats.skipped == 0
    assert spans.most == 1  # one after another, never beside each other
    assert sorted(when.timestamp() for _, _, when in spans.spans) == [3600, 7200, 10800]  # type: ignore[attr-defined]


async def test_buffer_one_lets_one_slot_wait_and_starts_it_when_the_run_ends(
    memory: MemoryBroker,
) -> None:
    app, spans = App(), _Spans()

    @app.job(every=3600, overlap="buffer_one")
    async def report(ctx: JobContext) -> None:
        await spans.run(int(ctx.scheduled_at.timestamp()), 0.5)  # type: ignore[union-attr]

    async with running_worker(app, memory) as worker:
        await memory.publish(_tick("report", 3600))
        await wait_until(lambda: spans.running == 1, what="the first run")
        await memory.publish(_tick("report", 7200))  # waits
        await wait_until(lambda: worker.stats.waiting == 1, what="the buffered run")
        await memory.publish(_tick("report", 10800))  # one waits already: skipped
        await wait_until(lambda: worker.stats.succeeded == 2, timeout=10, what="both runs")
    assert worker.stats.skipped == 1
    assert spans.most == 1
    (_, e1, first), (s2, _, second) = sorted(spans.spans)
    assert (first, second) == (3600, 7200)
    assert 0 <= s2 - e1 < 0.5  # started as soon as the first one ended


async def test_allow_lets_runs_overlap(memory: MemoryBroker) -> None:
    app, spans = App(), _Spans()

    @app.job(every=3600, overlap="allow")
    async def report(ctx: JobContext) -> None:
        await spans.run(ctx.scheduled_at, 0.4)

    async with running_worker(app, memory) as worker:
        for slot in (3600, 7200, 10800):
            await memory.publish(_tick("report", slot))
        await wait_until(lambda: worker.stats.succeeded == 3, what="three runs")
    assert spans.most == 3
    assert worker.stats.skipped == 0


async def test_a_run_enqueued_by_hand_waits_for_the_running_one_never_skipped(
    memory: MemoryBroker,
) -> None:
    app, spans = App(), _Spans()

    @app.job(every=3600)
    async def report(ctx: JobContext) -> None:
        await spans.run(ctx.scheduled_at, 0.4)

    async with running_worker(app, memory) as worker:
        await memory.publish(_tick("report", 3600))
        await wait_until(lambda: spans.running == 1, what="the first run")
        await memory.enqueue("report")
        await wait_until(lambda: worker.stats.succeeded == 2, what="both runs")
    assert worker.stats.skipped == 0
    assert spans.most == 1


async def test_a_limit_holds_and_waiting_jobs_block_no_other_job(memory: MemoryBroker) -> None:
    app, spans, quick = App(), _Spans(), []

    @app.job(concurrency=2)
    async def sync(ctx: JobContext, n: int) -> None:
        await spans.run(n, 0.2)

    @app.job
    async def ping(ctx: JobContext) -> None:
        quick.append(ctx.attempt)

    async with running_worker(app, memory, concurrency=3) as worker:
        for n in range(8):
            await memory.enqueue("sync", n=n)
        await wait_until(lambda: worker.stats.waiting >= 1, what="a waiting run")
        await memory.enqueue("ping")
        await wait_until(lambda: quick == [1], what="the other job, while sync ones wait")
        assert len(spans.spans) < 8
        await wait_until(lambda: len(spans.spans) == 8, timeout=15, what="every sync run")
    assert spans.most == 2
    assert sorted(n for _, _, n in spans.spans) == list(range(8))  # type: ignore[type-var]
    assert worker.stats.retried == worker.stats.dead_lettered == 0


async def test_a_limit_per_key_value_holds_for_each_value(memory: MemoryBroker) -> None:
    app = App()
    running: dict[str, int] = {"a": 0, "b": 0}
    most: dict[str, int] = {"a": 0, "b": 0}

    @app.job(concurrency=1, concurrency_key="tenant")
    async def export(ctx: JobContext, tenant: str) -> None:
        running[tenant] += 1
        most[tenant] = max(most[tenant], running[tenant])
        await asyncio.sleep(0.15)
        running[tenant] -= 1

    async with running_worker(app, memory, concurrency=6) as worker:
        for tenant in "ababab":
            await memory.enqueue("export", tenant=tenant)
        await wait_until(lambda: running["a"] == running["b"] == 1, what="one of each at once")
        await wait_until(lambda: worker.stats.succeeded == 6, timeout=15, what="every run")
    assert most == {"a": 1, "b": 1}


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"overlap": "never"}, "overlap must be one of skip, buffer_one, allow"),
        ({"concurrency": 0}, "concurrency must be an integer from 1"),
        ({"concurrency": 2.5}, "concurrency must be an integer"),
        ({"concurrency_key": "tenant"}, "concurrency_key needs concurrency=N"),
        ({"concurrency": 2, "concurrency_key": "nope"}, "'nope' is not a keyword argument"),
    ],
)
def test_bad_limits_are_refused_at_import(options: dict[str, object], says: str) -> None:
    app = App()
    with pytest.raises(JobDefinitionError, match=says):

        @app.job(every=60, **options)  # type: ignore[call-overload]
        async def job(ctx: JobContext, tenant: str = "") -> None: ...


class _NoLeases(MemoryBroker):
    capabilities = MemoryBroker.capabilities - {Capability.STORE}


async def test_a_limit_on_a_broker_without_leases_is_refused_at_start(queue_name: str) -> None:
    app = App()

    @app.job(concurrency=2)
    async def sync(ctx: JobContext) -> None: ...

    async with _NoLeases(MemorySettings(queue_name)) as broker:
        with pytest.raises(
            ConfigurationError,
            match="has no store for leases, which concurrency= and rate_limit= need",
        ):
            async with running_worker(app, broker):
                pass

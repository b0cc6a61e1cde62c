"""Contract tests of the worker runtime and the ticker running on the adapter."""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

from ...app import App
from ...control import steering
from ...control.jobs import job_status
from ...errors import BrokerError
from ...jobs import JobContext, Snooze
from ...ports.capabilities import Capability
from ...ports.messages import JobMessage, decode_message
from ...ports.protocols import BrokerProtocol
from ...ports.records import Delivery
from ...ports.statuses import JobState
from ...runtime.worker import Worker
from ...scheduling.ticker import Ticker
from ..helpers import (
    PROMPT,
    BrokerFactory,
    connected,
    many,
    receive_all,
    received_by_any,
    running_worker,
    wait_until,
)
from .base import ContractBase
from .requirements import SHORT_DEDUP_WINDOW, SHORT_VISIBILITY, requires


class WorkerContract(ContractBase):
    """What ``m worker`` promises (see the README), on this adapter."""

    async def test_hooks_set_up_state_for_plain_and_async_handlers_and_tear_it_down(
        self, broker: BrokerProtocol
    ) -> None:
        app, events = App(), []

        @app.on_startup
        async def open_pool(state: Any) -> None:
            state.pool = "pool"
            events.append("up")

        @app.on_shutdown
        def close_pool(state: Any) -> None:
            events.append("down")

        @app.job
        async def uses(ctx: JobContext) -> None:
            events.append(f"async {ctx.state.pool}")

        @app.job
        def blocks(ctx: JobContext) -> None:  # runs in the worker's thread pool
            events.append(f"plain {ctx.state.pool}")

        await broker.enqueue("uses")
        await broker.enqueue("blocks")
        async with running_worker(app, broker) as worker:
            await wait_until(lambda: worker.stats.succeeded == 2)
        assert events[0] == "up"
        assert sorted(events[1:3]) == ["async pool", "plain pool"]
        assert events[3:] == ["down"]

    async def test_the_worker_runs_a_job_then_acks_it(self, broker: BrokerProtocol) -> None:
        app = App()
        seen: list[tuple[str, int, dict[str, Any]]] = []

        @app.job
        async def greet(ctx: JobContext, name: str) -> None:
            seen.append((ctx.job_id, ctx.attempt, {"name": name}))

        job_id = await broker.enqueue("greet", name="ada")
        async with running_worker(app, broker) as worker:
            await wait_until(lambda: worker.stats.succeeded == 1)
        assert seen == [(job_id, 1, {"name": "ada"})]
        assert list(await broker.receive(10, min(broker.visibility_timeout + 0.5, 2.0))) == []

    async def test_a_failure_is_retried_with_a_higher_attempt(self, broker: BrokerProtocol) -> None:
        app = App(backoff=0.1)
        attempts: list[int] = []

        @app.job
        async def flaky(ctx: JobContext) -> None:
            attempts.append(ctx.attempt)
            if ctx.attempt == 1:
                raise RuntimeError("first try fails")

        await broker.enqueue("flaky")
        async with running_worker(app, broker) as worker:
            await wait_until(lambda: worker.stats.succeeded == 1)
        assert attempts == [1, 2]
        assert worker.stats.retried == 1

    @requires(Capability.DELAYED_ENQUEUE)
    async def test_a_snoozed_job_runs_again_as_the_same_job_with_no_attempt_used(
        self, broker: BrokerProtocol
    ) -> None:
        app = App()
        runs: list[tuple[str, int, float]] = []

        @app.job(max_attempts=1)
        async def snoozy(ctx: JobContext) -> None:
            runs.append((ctx.job_id, ctx.attempt, time.time()))
            if len(runs) == 1:
                raise Snooze(0.5)

        # With a deduplication id: a broker that derives ids from it keeps the job's.
        job_id = await broker.enqueue("snoozy", deduplication_id=f"once:{time.time_ns()}")
        async with running_worker(app, broker) as worker:
            await wait_until(lambda: worker.stats.succeeded == 1, timeout=PROMPT + 5)
        assert [(i, attempt) for i, attempt, _ in runs] == [(job_id, 1), (job_id, 1)]
        assert runs[1][2] - runs[0][2] >= 0.5 - 0.05  # due no sooner (clock rounding)
        assert (worker.stats.snoozed, worker.stats.retried) == (1, 0)
        if Capability.STORE in broker.capabilities:
            status = await job_status(broker, job_id)
            assert status.state is JobState.SUCCEEDED

    async def test_the_last_failed_attempt_is_dead_lettered(self, broker: BrokerProtocol) -> None:
        app = App(backoff=0.05)

        @app.job(max_attempts=2)
        async def doomed(ctx: JobContext) -> None:
            raise ValueError("always broken")

        await broker.enqueue("doomed")
        async with running_worker(app, broker) as worker:
            await wait_until(lambda: worker.stats.dead_lettered == 1)
        assert (worker.stats.retried, worker.stats.succeeded) == (1, 0)
        assert list(await broker.receive(10, min(broker.visibility_timeout + 0.5, 2.0))) == []

    @requires(Capability.DEAD_LETTER_INSPECTION)
    async def test_a_dead_letter_from_the_worker_says_why(self, broker: BrokerProtocol) -> None:
        app = App(backoff=0.05)
        calls: list[int] = []

        @app.job(max_attempts=3)
        async def doomed(ctx: JobContext) -> None:
            calls.append(ctx.attempt)
            raise ValueError("always broken")

        job_id = await broker.enqueue("doomed")
        async with running_worker(app, broker) as worker:
            await wait_until(lambda: worker.stats.dead_lettered == 1)
        assert calls == [1, 2, 3]
        [dead] = await broker.dead_letters()
        assert "failed after 3 attempt(s)" in dead.reason
        assert "ValueError: always broken" in dead.reason
        assert (decode_message(dead.body).id, dead.attempts) == (job_id, 3)

    @requires(Capability.DEAD_LETTER_INSPECTION)
    async def test_a_job_over_its_timeout_fails(self, broker: BrokerProtocol) -> None:
        app = App()

        @app.job(timeout=0.2, max_attempts=1)
        async def slow(ctx: JobContext) -> None:
            await asyncio.sleep(30)

        await broker.enqueue("slow")
        async with running_worker(app, broker) as worker:
            await wait_until(lambda: worker.stats.dead_lettered == 1)
        [dead] = await broker.dead_letters()
        assert "timed out after 0.2s" in dead.reason

    @requires(Capability.DEAD_LETTER_INSPECTION)
    async def test_unknown_jobs_and_garbage_are_dead_lettered_and_the_worker_goes_on(
        self, broker: BrokerProtocol
    ) -> None:
        app = App()
        ran: list[str] = []

        @app.job
        async def known(ctx: JobContext, n: int) -> None:
            ran.append(ctx.job_id)

        await broker.enqueue("not_registered")
        await broker.enqueue("known", wrong_argument=1)
        await broker.requeue(b"\x00\xffnot json at all")
        await broker.requeue(json.dumps({"v": 1, "id": "x", "job": "known"}).encode())
        async with running_worker(app, broker) as worker:
            await wait_until(lambda: worker.stats.dead_lettered == 4)
            good = await broker.enqueue("known", n=1)
            await wait_until(lambda: ran == [good])
        reasons = sorted(d.reason for d in await broker.dead_letters())
        assert any("unknown job 'not_registered'" in r for r in reasons)
        assert any("kwargs do not match handler of 'known'" in r for r in reasons)
        assert any(r.startswith("undecodable message: body is not JSON") for r in reasons)
        assert any("'kwargs' must be an object" in r for r in reasons)

    @requires(Capability.STORE_DEADLINE)
    async def test_a_message_that_reaches_the_broker_past_its_deadline_never_runs(
        self, broker: BrokerProtocol
    ) -> None:
        app = App()
        ran: list[str] = []

        @app.job
        async def tick(ctx: JobContext) -> None:
            ran.append(ctx.job_id)

        now = time.time()
        late = JobMessage(
            "tick", deduplication_id="tick:tick:60", enqueued_at=now, scheduled_at=60,
            not_after=now - 30,
        )  # fmt: skip
        try:  # refused, stored nowhere (told like a duplicate) or dropped by the worker
            refused = int((await broker.publish(late)).duplicate)
        except BrokerError:
            refused = 1
        on_time = await broker.enqueue("tick", deduplication_id="tick:tick:61")
        async with running_worker(app, broker) as worker:
            await wait_until(lambda: worker.stats.expired + refused == 1 and ran != [])
        assert ran == [on_time]
        assert await receive_all(broker) == []

    @requires(SHORT_VISIBILITY)
    async def test_a_job_running_past_the_visibility_timeout_stays_reserved(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        app = App()
        runs: list[int] = []
        visibility = broker.visibility_timeout

        @app.job(timeout=60)
        async def long(ctx: JobContext) -> None:
            runs.append(ctx.attempt)
            await asyncio.sleep(visibility * 2.5)

        await broker.enqueue("long")
        async with connected(broker_factory) as other, running_worker(app, broker) as worker:
            await wait_until(lambda: runs == [1])
            async with asyncio.timeout(visibility * 2.5 + 2 * PROMPT):
                while worker.stats.succeeded == 0:  # the heartbeats keep others off it
                    assert list(await other.receive(10, visibility / 3)) == []
        assert runs == [1]

    async def test_a_stopped_worker_hands_its_unfinished_job_back(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        app = App()
        started = asyncio.Event()

        @app.job
        async def endless(ctx: JobContext) -> None:
            started.set()
            await asyncio.sleep(3600)

        job_id = await broker.enqueue("endless")
        worker = Worker(app, broker, concurrency=1, shutdown_timeout=0.2, fetch_timeout=0.2)
        task = asyncio.create_task(worker.run())
        async with asyncio.timeout(PROMPT):
            await started.wait()
        worker.stop()
        async with asyncio.timeout(PROMPT + 15):
            await task
        assert worker.stats.released == 1
        async with connected(broker_factory) as other:
            [again] = await received_by_any([other, broker], PROMPT)
            assert decode_message(again.delivery.body).id == job_id
            await again.consumer.ack(again.delivery)

    async def test_three_tickers_enqueue_each_slot_once(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        app = App()

        @app.job(every=1)
        async def tick(ctx: JobContext) -> None: ...

        window = broker.dedup_window
        grace = max(0.0, min(0.5, window / 4))
        async with many(broker_factory, 3) as brokers:
            tickers = [Ticker(app.jobs.values(), b, grace=grace, clock_skew=0.0) for b in brokers]
            tasks = [asyncio.create_task(t.run()) for t in tickers]
            await wait_until(lambda: sum(t.stats.published for t in tickers) >= 3, timeout=10)
            for t in tickers:
                t.stop()
            await asyncio.gather(*tasks)
        slots = [decode_message(d.body).scheduled_at or 0 for d in await receive_all(broker)]
        assert all(slots)
        assert len(slots) == len(set(slots)), f"a slot was enqueued twice: {sorted(slots)}"
        published = sum(t.stats.published for t in tickers)
        # a publish with no answer in time may be stored although no ticker counted it
        unanswered = sum(t.stats.unanswered for t in tickers)
        assert published <= len(slots) <= published + unanswered, (published, unanswered)
        assert sum(t.stats.failed for t in tickers) == 0
        assert sum(t.stats.duplicates for t in tickers) >= len(slots) - 1 - unanswered

    @requires(Capability.STORE)
    async def test_tickers_enqueue_nothing_of_a_paused_schedule_then_each_slot_once(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        app = App()

        @app.job(every=1)
        async def beat(ctx: JobContext) -> None: ...

        grace = max(0.0, min(0.5, broker.dedup_window / 4))
        await steering.pause(broker, "beat", reason="contract")
        async with many(broker_factory, 3) as brokers:
            tickers = [Ticker(app.jobs.values(), b, grace=grace, clock_skew=0.0) for b in brokers]
            tasks = [asyncio.create_task(t.run()) for t in tickers]
            await wait_until(lambda: all(t.stats.paused >= 2 for t in tickers), timeout=15)
            assert sum(t.stats.published + t.stats.duplicates for t in tickers) == 0
            assert await receive_all(broker, quiet=0.3) == []
            resumed = time.time()
            await steering.resume(brokers[1], "beat")
            await wait_until(lambda: sum(t.stats.published for t in tickers) >= 3, timeout=15)
            for t in tickers:
                t.stop()
            await asyncio.gather(*tasks)
        slots = sorted(decode_message(d.body).scheduled_at or 0 for d in await receive_all(broker))
        assert len(slots) == len(set(slots)), f"a slot was enqueued twice: {slots}"
        assert slots == list(range(slots[0], slots[-1] + 1)), f"a slot was left out: {slots}"
        assert slots[0] >= int(resumed) - grace - 1, (slots, resumed)
        state = await steering.read(broker, "beat")
        assert not state.paused
        assert state.latest_slot in slots  # recorded once a minute without catch-up

    @requires(Capability.STORE, SHORT_DEDUP_WINDOW)
    async def test_a_slot_every_ticker_missed_is_caught_up_once_past_the_dedup_window(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        window = broker.dedup_window
        grace = min(0.5, window / 4)
        period = math.ceil(window + grace + 1.5)  # room for a replica between two slots
        app = App()

        @app.job(every=period, catchup_window=60)
        async def beat(ctx: JobContext) -> None: ...

        def ticker(b: BrokerProtocol) -> Ticker:
            return Ticker(app.jobs.values(), b, grace=grace, clock_skew=0.0)

        async def sleep_until(at: float) -> None:
            await asyncio.sleep(max(0.0, at - time.time()))

        async with many(broker_factory, 3) as brokers:
            first = ticker(brokers[0])
            task = asyncio.create_task(first.run())
            await wait_until(lambda: first.stats.published == 1, timeout=period + 10)
            first.stop()
            await task
            # One slot, or the next one too on a machine slow to stop the ticker: the
            # slot after the latest is the one every ticker misses.
            recorded = [d.scheduled_at for d in map(_message, await receive_all(broker))]
            assert recorded, "the first ticker published nothing"
            assert None not in recorded
            missed = max(r for r in recorded if r is not None) + period
            await sleep_until(missed + grace + 0.1)  # no ticker ran: the slot is past grace
            back = ticker(brokers[1])
            task = asyncio.create_task(back.run())
            await wait_until(lambda: back.stats.caught_up == 1, timeout=10)
            back.stop()
            await task
            await sleep_until(time.time() + window + 0.2)  # the broker forgot its dedup id
            assert time.time() < missed + period - grace, "the machine is too slow for the test"
            later = [ticker(b) for b in brokers]
            tasks = [asyncio.create_task(t.run()) for t in later]
            await wait_until(
                lambda: sum(t.stats.published for t in later) == 1, timeout=period + 10
            )
            for t in later:
                t.stop()
            await asyncio.gather(*tasks)
        slots = [_message(d).scheduled_at for d in await receive_all(broker)]
        assert slots == [missed, missed + period], f"expected the missed slot once: {slots}"
        assert sum(t.stats.caught_up for t in later) == 0
        assert (await steering.read(broker, "beat")).latest_slot == missed + period


def _message(delivery: Delivery) -> JobMessage:
    return decode_message(delivery.body)

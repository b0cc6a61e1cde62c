"""Contract tests every broker adapter must pass. See the package docstring."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import pytest

from ..app import App
from ..broker import Capability, Delivery
from ..errors import InvalidJobError
from ..jobs import JobContext
from ..messages import decode_message
from ..protocols import BrokerProtocol
from ..ticker import InProcessTickerAdapter
from ..worker import Worker

BrokerFactory = Callable[[], BrokerProtocol]
# Longest a test waits for something the broker should do promptly.
PROMPT = 5.0


async def wait_until(
    predicate: Callable[[], bool | Awaitable[bool]], timeout: float = PROMPT, interval: float = 0.02
) -> None:
    """Poll ``predicate`` until it holds; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if not isinstance(value, bool):
            value = await value
        if value:
            return
        if time.monotonic() >= deadline:
            pytest.fail(f"condition not met within {timeout:g}s")
        await asyncio.sleep(interval)


B = TypeVar("B", bound=BrokerProtocol)


async def synced(broker: B) -> B:
    """``broker`` connected and with its schema synced, ready for enqueue and receive."""
    await broker.connect()
    await broker.sync_schema()
    return broker


async def receive_all(
    broker: BrokerProtocol, *, quiet: float = 0.5, limit: int = 10_000
) -> list[Delivery]:
    """Receive until nothing arrives for ``quiet`` seconds."""
    out: list[Delivery] = []
    while len(out) < limit:
        batch = await broker.receive(100, quiet)
        if not batch:
            return out
        out.extend(batch)
    return out


class BrokerContract:
    """Mixin with the contract tests; see :mod:`framework_m_core.testing`."""

    pytestmark = pytest.mark.anyio

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @pytest.fixture
    async def broker(self, broker_factory: BrokerFactory) -> AsyncIterator[BrokerProtocol]:
        async with self.connected(broker_factory) as b:
            yield b

    @asynccontextmanager
    async def connected(self, factory: BrokerFactory) -> AsyncIterator[BrokerProtocol]:
        b = factory()
        await b.connect()
        try:
            await b.sync_schema()
            yield b
        finally:
            await b.close()

    def require(self, broker: BrokerProtocol, capability: str) -> None:
        if capability not in broker.capabilities:
            pytest.skip(f"adapter does not declare the {capability!r} capability")

    def require_short(self, seconds: float, what: str, limit: float = 5.0) -> None:
        if seconds > limit:
            pytest.skip(
                f"the test broker's {what} is {seconds:g}s; give it at most {limit:g}s to run this"
            )

    # -- enqueue and deduplication ---------------------------------------------------

    async def test_enqueue_returns_id_and_message_round_trips(self, broker: BrokerProtocol) -> None:
        first = await broker.enqueue("send", to="a@example.com", n=1)
        second = await broker.enqueue("send", to="b@example.com", n=2)
        assert isinstance(first, str)
        assert first
        assert first != second
        got = {m.id: m for m in (decode_message(d.body) for d in await receive_all(broker))}
        assert set(got) == {first, second}
        assert got[first].job_name == "send"
        assert got[first].kwargs == {"to": "a@example.com", "n": 1}

    async def test_first_delivery_is_attempt_one(self, broker: BrokerProtocol) -> None:
        await broker.enqueue("job")
        [delivery] = await broker.receive(10, PROMPT)
        assert delivery.attempt == 1

    async def test_non_json_kwargs_are_refused_before_sending(self, broker: BrokerProtocol) -> None:
        with pytest.raises(InvalidJobError, match="when"):
            await broker.enqueue("job", when=object())
        with pytest.raises(InvalidJobError):
            await broker.enqueue("job", ratio=float("nan"))
        with pytest.raises(InvalidJobError):
            await broker.enqueue("no spaces allowed")
        assert await broker.receive(10, 0.3) == []
        assert broker.stats.enqueued == 0

    async def test_duplicate_returns_original_id_and_is_counted(
        self, broker: BrokerProtocol
    ) -> None:
        first = await broker.enqueue("report", deduplication_id="tick:report:1700000000", day=1)
        again = await broker.enqueue("report", deduplication_id="tick:report:1700000000", day=2)
        assert again == first
        assert broker.stats.duplicates == 1
        assert broker.stats.enqueued == 1
        [delivery] = await receive_all(broker)
        assert decode_message(delivery.body).kwargs == {"day": 1}

    async def test_concurrent_publishers_of_one_id_leave_one_message(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        publishers = 8
        async with _many(broker_factory, publishers) as brokers:
            ids = await asyncio.gather(
                *(b.enqueue("tick_job", deduplication_id="tick:tick_job:42") for b in brokers)
            )
            assert len(set(ids)) == 1
            assert sum(b.stats.duplicates for b in brokers) == publishers - 1
        deliveries = await receive_all(broker)
        assert [decode_message(d.body).id for d in deliveries] == [ids[0]]

    async def test_distinct_ids_are_never_merged(self, broker: BrokerProtocol) -> None:
        ids = await asyncio.gather(
            *(broker.enqueue("job", deduplication_id=f"tick:job:{i}") for i in range(50))
        )
        assert len(set(ids)) == 50
        assert broker.stats.duplicates == 0
        assert len(await receive_all(broker)) == 50

    async def test_dedup_window_expires(self, broker: BrokerProtocol) -> None:
        window = broker.dedup_window
        self.require_short(window, "dedup window")
        first = await broker.enqueue("job", deduplication_id="expiring")
        assert await broker.enqueue("job", deduplication_id="expiring") == first
        await asyncio.sleep(window + 0.5)  # let the window pass
        later = await broker.enqueue("job", deduplication_id="expiring")
        if Capability.NEW_ID_AFTER_WINDOW in broker.capabilities:
            assert later != first
        assert len(await receive_all(broker)) == 2  # the second one was stored

    # -- consuming -------------------------------------------------------------------

    async def test_ack_removes(self, broker: BrokerProtocol) -> None:
        await broker.enqueue("job")
        [delivery] = await broker.receive(10, PROMPT)
        await broker.ack(delivery)
        wait = min(broker.visibility_timeout + 0.5, 3.0)
        assert await broker.receive(10, wait) == []

    async def test_retry_redelivers_after_delay_with_higher_attempt(
        self, broker: BrokerProtocol
    ) -> None:
        job_id = await broker.enqueue("job", x=1)
        [first] = await broker.receive(10, PROMPT)
        retried_at = time.monotonic()
        await broker.retry(first, 0.5)
        [second] = await broker.receive(10, PROMPT)
        assert time.monotonic() - retried_at >= 0.4
        assert decode_message(second.body).id == job_id
        assert second.attempt == first.attempt + 1
        await broker.ack(second)

    async def test_release_hands_back_for_prompt_redelivery(self, broker: BrokerProtocol) -> None:
        job_id = await broker.enqueue("job")
        [first] = await broker.receive(10, PROMPT)
        await broker.release(first)
        [again] = await broker.receive(10, PROMPT)
        assert decode_message(again.body).id == job_id
        await broker.ack(again)

    async def test_unacked_delivery_is_redelivered_after_visibility_timeout(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        self.require_short(broker.visibility_timeout, "visibility timeout")
        job_id = await broker.enqueue("job")
        [taken] = await broker.receive(10, PROMPT)  # and never acked: a crashed worker
        async with self.connected(broker_factory) as other:
            [again] = await other.receive(10, broker.visibility_timeout + PROMPT)
            assert decode_message(again.body).id == job_id
            assert again.attempt == taken.attempt + 1
            await other.ack(again)

    async def test_unacked_delivery_of_a_closed_consumer_is_redelivered(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        self.require(broker, Capability.REDELIVER_ON_CLOSE)
        job_id = await broker.enqueue("job")
        async with self.connected(broker_factory) as other:
            assert len(await other.receive(10, PROMPT)) == 1
        [again] = await broker.receive(10, PROMPT)
        assert decode_message(again.body).id == job_id

    async def test_extend_keeps_a_long_job_reserved(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        visibility = broker.visibility_timeout
        self.require_short(visibility, "visibility timeout")
        async with self.connected(broker_factory) as other:  # before the clock starts
            await broker.enqueue("job")
            [taken] = await broker.receive(10, PROMPT)
            end = time.monotonic() + visibility * 2
            while time.monotonic() < end:
                await broker.extend(taken)
                assert await other.receive(10, visibility / 3) == []
        await broker.ack(taken)

    async def test_dead_letter_keeps_body_and_reason(self, broker: BrokerProtocol) -> None:
        self.require(broker, Capability.DEAD_LETTER_INSPECTION)
        await broker.enqueue("job", k="v")
        [delivery] = await broker.receive(10, PROMPT)
        await broker.dead_letter(delivery, "poison: test")
        dead = await broker.dead_letters()
        assert [(d.body, d.reason) for d in dead] == [(delivery.body, "poison: test")]
        assert await broker.receive(10, min(broker.visibility_timeout + 0.5, 3.0)) == []

    # -- schema sync -----------------------------------------------------------------

    async def test_schema_sync_is_idempotent_and_keeps_messages(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        job_id = await broker.enqueue("job")
        async with self.connected(broker_factory) as other:
            assert (await other.sync_schema()).in_sync
            assert (await other.plan_schema()).in_sync
            assert (await other.sync_schema(dry_run=True)).in_sync
        [delivery] = await broker.receive(10, PROMPT)
        assert decode_message(delivery.body).id == job_id

    # -- the worker runtime on this broker -------------------------------------------

    async def test_worker_runs_job_then_acks(self, broker: BrokerProtocol) -> None:
        app = App()
        seen: list[tuple[str, int, dict[str, Any]]] = []

        @app.job
        async def greet(ctx: JobContext, name: str) -> None:
            seen.append((ctx.job_id, ctx.attempt, {"name": name}))

        job_id = await broker.enqueue("greet", name="ada")
        async with running_worker(app, broker) as worker:
            await wait_until(lambda: worker.stats.succeeded == 1)
        assert seen == [(job_id, 1, {"name": "ada"})]
        assert await broker.receive(10, min(broker.visibility_timeout + 0.5, 3.0)) == []

    async def test_worker_retries_a_failure_with_a_higher_attempt(
        self, broker: BrokerProtocol
    ) -> None:
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

    async def test_worker_dead_letters_after_the_last_attempt(self, broker: BrokerProtocol) -> None:
        app = App(backoff=0.05)
        calls: list[int] = []

        @app.job(max_attempts=3)
        async def doomed(ctx: JobContext) -> None:
            calls.append(ctx.attempt)
            raise ValueError("always broken")

        await broker.enqueue("doomed")
        async with running_worker(app, broker) as worker:
            await wait_until(lambda: worker.stats.dead_lettered == 1)
        assert calls == [1, 2, 3]
        if Capability.DEAD_LETTER_INSPECTION in broker.capabilities:
            [dead] = await broker.dead_letters()
            assert "failed after 3 attempt(s)" in dead.reason
            assert "ValueError: always broken" in dead.reason

    async def test_worker_enforces_the_job_timeout(self, broker: BrokerProtocol) -> None:
        app = App()

        @app.job(timeout=0.2, max_attempts=1)
        async def slow(ctx: JobContext) -> None:
            await asyncio.sleep(30)

        await broker.enqueue("slow")
        async with running_worker(app, broker) as worker:
            await wait_until(lambda: worker.stats.dead_lettered == 1)
        if Capability.DEAD_LETTER_INSPECTION in broker.capabilities:
            [dead] = await broker.dead_letters()
            assert "timed out after 0.2s" in dead.reason

    async def test_unknown_job_and_garbage_are_dead_lettered_and_worker_goes_on(
        self, broker: BrokerProtocol
    ) -> None:
        self.require(broker, Capability.RAW_PUBLISH)
        app = App()
        ran: list[str] = []

        @app.job
        async def known(ctx: JobContext) -> None:
            ran.append(ctx.job_id)

        await broker.enqueue("not_registered")
        await broker.publish_raw(b"\x00\xffnot json at all")
        await broker.publish_raw(json.dumps({"v": 1, "id": "x", "job": "known"}).encode())
        async with running_worker(app, broker) as worker:
            await wait_until(lambda: worker.stats.dead_lettered == 3)
            good = await broker.enqueue("known")
            await wait_until(lambda: ran == [good])
        if Capability.DEAD_LETTER_INSPECTION in broker.capabilities:
            reasons = sorted(d.reason for d in await broker.dead_letters())
            assert any("unknown job 'not_registered'" in r for r in reasons)
            assert any(r.startswith("undecodable message: body is not JSON") for r in reasons)
            assert any("'kwargs' must be an object" in r for r in reasons)

    async def test_three_tickers_enqueue_each_slot_once(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        app = App()

        @app.job(every=1)
        async def tick(ctx: JobContext) -> None: ...

        window = broker.dedup_window
        grace = max(0.0, min(0.5, window / 4))
        async with _many(broker_factory, 3) as brokers:
            tickers = [
                InProcessTickerAdapter(app.jobs.values(), b, grace=grace, clock_skew=0.0)
                for b in brokers
            ]
            tasks = [asyncio.create_task(t.run()) for t in tickers]
            await asyncio.sleep(2.5)  # let slots pass
            for t in tickers:
                t.stop()
            await asyncio.gather(*tasks)
        slots = [decode_message(d.body).scheduled_at or 0 for d in await receive_all(broker)]
        assert all(slots)
        assert len(slots) >= 2
        assert len(slots) == len(set(slots)), f"a slot was enqueued twice: {sorted(slots)}"
        published = sum(t.stats.published for t in tickers)
        assert published == len(slots)
        assert sum(t.stats.duplicates for t in tickers) >= len(slots) - 1


@asynccontextmanager
async def _many(factory: BrokerFactory, n: int) -> AsyncIterator[Sequence[BrokerProtocol]]:
    brokers = [factory() for _ in range(n)]
    await asyncio.gather(*(b.connect() for b in brokers))
    try:
        yield brokers
    finally:
        await asyncio.gather(*(b.close() for b in brokers), return_exceptions=True)


@asynccontextmanager
async def running_worker(app: App, broker: BrokerProtocol, **options: Any) -> AsyncIterator[Worker]:
    """A :class:`Worker` running in the background; stopped gracefully on exit."""
    options = {"concurrency": 4, "shutdown_timeout": 5.0, "fetch_timeout": 0.2, **options}
    worker = Worker(app, broker, **options)
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)

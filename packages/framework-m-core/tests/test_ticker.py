from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from framework_m_core import (
    App,
    BrokerError,
    ConfigurationError,
    JobContext,
    JobDefinitionError,
    JobMessage,
    PublishResult,
    Ticker,
    decode_message,
)
from framework_m_core.adapters.memory import MemoryBroker, MemorySettings
from framework_m_core.control import steering
from framework_m_core.ports import Capability
from framework_m_core.ports.messages import caught_up
from framework_m_core.scheduling import clocks
from framework_m_core.scheduling import ticker as ticker_module
from framework_m_core.scheduling.ticker import check_grace, default_grace
from framework_m_core.testing import (
    receive_all,
    received_slots,
    synced,
    ticks_between,
    wait_until,
)

pytestmark = pytest.mark.anyio


def app_every(seconds: int) -> App:
    app = App()

    @app.job(every=seconds)
    async def tick(ctx: JobContext) -> None: ...

    return app


def shifted_clock(broker: MemoryBroker, target: float) -> Callable[[], float]:
    """A wall clock that reads ``target`` now and then runs at real speed; ``broker``'s
    clock (the same machine's) reads the same."""
    offset = target - time.time()
    broker.clock = lambda: time.time() + offset
    return broker.clock


class Outage(MemoryBroker):
    """memory:// whose publishes fail while ``down``, as a broker out of reach."""

    down = False

    async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
        if self.down:
            raise BrokerError("connection refused")
        return await super()._publish(message, body)


class TestGraceCheck:
    def test_refuses_grace_plus_skew_not_below_window(self) -> None:
        check_grace(25, 5, 30.1)
        with pytest.raises(ConfigurationError, match=r"grace 25s \+ clock skew 5s = 30s"):
            check_grace(25, 5, 30)
        with pytest.raises(ConfigurationError, match="must not be negative"):
            check_grace(-1, 5, 30)

    def test_default_grace_fits_the_window(self) -> None:
        assert default_grace(5, 120) == 30
        assert default_grace(5, 10) == 2.5
        assert default_grace(5, 4) == 0

    async def test_ticker_check_uses_the_brokers_window(self, queue_name: str) -> None:
        broker = await synced(MemoryBroker(MemorySettings(queue_name, dedup_window=10)))
        app = app_every(1)
        Ticker(app.jobs.values(), broker, grace=4, clock_skew=5).check()
        ticker = Ticker(app.jobs.values(), broker, grace=6, clock_skew=5)
        with pytest.raises(ConfigurationError, match="dedup window of 10s"):
            ticker.check()
        with pytest.raises(ConfigurationError):
            await ticker.run()
        assert await received_slots(broker) == []


class TestStartup:
    async def test_fires_only_the_latest_slot_inside_grace(self, memory: MemoryBroker) -> None:
        boundary = (int(time.time()) // 60 + 5) * 60
        # 27 s after a minute boundary: slots of every 5 s at -2, -7, ... -27 are all in grace.
        ticker = Ticker(
            app_every(5).jobs.values(),
            memory,
            grace=29,
            clock=shifted_clock(memory, boundary + 27.5),
        )
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.published == 1)
        ticker.stop()
        await task
        assert await received_slots(memory) == [boundary + 25]

    async def test_fires_nothing_when_the_last_slot_is_older_than_grace(
        self, memory: MemoryBroker
    ) -> None:
        boundary = (int(time.time()) // 60 + 5) * 60
        ticker = Ticker(
            app_every(60).jobs.values(),
            memory,
            grace=30,
            clock=shifted_clock(memory, boundary + 31),
        )
        task = asyncio.create_task(ticker.run())
        await asyncio.sleep(0.3)  # the ticker decides at start; give it the chance to misbehave
        ticker.stop()
        await task
        assert await received_slots(memory) == []
        assert ticker.stats.published == 0


class TestRunning:
    async def test_each_second_is_enqueued_once_with_its_slot(self, memory: MemoryBroker) -> None:
        ticker = Ticker(app_every(1).jobs.values(), memory, grace=2)
        started = time.time()
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.published >= 4, timeout=8)
        ticker.stop()
        await task
        slots = await received_slots(memory)
        assert slots == list(range(slots[0], slots[0] + len(slots)))
        assert slots[0] >= int(started) - 2
        for d in await memory.dead_letters():
            pytest.fail(f"unexpected dead letter {d}")

    async def test_dedup_ids_are_tick_job_slot(self, memory: MemoryBroker) -> None:
        ticker = Ticker(app_every(1).jobs.values(), memory, grace=2)
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.published >= 1)
        ticker.stop()
        await task
        for d in await receive_all(memory, quiet=0.2):
            msg = decode_message(d.body)
            assert msg.deduplication_id == f"tick:tick:{msg.scheduled_at}"

    @pytest.mark.parametrize(
        ("schedule", "counted", "says"),
        [("every", 86_400 - 3, "86397"), ("cron", 100, "100+")],
    )
    async def test_a_day_long_stall_is_counted_without_walking_every_slot(
        self,
        memory: MemoryBroker,
        caplog: pytest.LogCaptureFixture,
        schedule: str,
        counted: int,
        says: str,
    ) -> None:
        app = App()

        @app.job(**({"every": 1} if schedule == "every" else {"schedule": "* * * * * *"}))
        async def tick(ctx: JobContext) -> None: ...

        jump = 0.0

        def clock() -> float:
            return float(int(time.time())) + 0.5 + jump  # mid-second: no boundary races

        memory.clock = clock
        ticker = Ticker(app.jobs.values(), memory, grace=3, clock=clock)
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.published >= 1)
        jump = 86_400.0  # a day-long stall (a suspended VM)
        await wait_until(lambda: ticker.stats.skipped > 0)
        ticker.stop()
        await task
        [found] = re.findall(
            r"tick: (\d+\+?) slot\(s\) from \S+ on were not enqueued: older", caplog.text
        )
        if says.endswith("+"):
            assert found == says
        else:
            assert abs(int(found) - int(says)) <= 2
        # Besides the day, the slots inside grace but the latest are superseded (and a
        # loaded machine may have ticked a slot late before the jump): each logged.
        logged = re.findall(r"tick: (\d+)\+? slot\(s\) from \S+ on were not enqueued", caplog.text)
        assert ticker.stats.skipped == sum(int(n) for n in logged)
        assert counted - 2 <= ticker.stats.skipped <= counted + 6

    async def test_clock_jump_skips_slots_older_than_grace(
        self, memory: MemoryBroker, caplog: pytest.LogCaptureFixture
    ) -> None:
        jump = 0.0

        def clock() -> float:
            return time.time() + jump

        memory.clock = clock  # the machine's clock jumps: the broker's with it
        ticker = Ticker(app_every(1).jobs.values(), memory, grace=3, clock=clock)
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.published >= 1)
        before = ticker.stats.published
        jump = 100.0
        await wait_until(lambda: ticker.stats.skipped > 0)
        await wait_until(lambda: ticker.stats.published >= before + 3)
        ticker.stop()
        await task
        assert 90 <= ticker.stats.skipped <= 100
        slots = await received_slots(memory)
        assert len(slots) == len(set(slots))
        newest = max(slots)
        assert all(s <= newest - 97 or s > newest - 4 for s in slots)
        assert "older than grace 3s" in caplog.text

    async def test_publish_is_retried_with_the_same_id_inside_grace(self, queue_name: str) -> None:
        failures = 2

        class Flaky(MemoryBroker):
            async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
                nonlocal failures
                if failures:
                    failures -= 1
                    raise BrokerError("connection lost")
                return await super()._publish(message, body)

        broker = await synced(Flaky(MemorySettings(queue_name, dedup_window=30)))
        ticker = Ticker(app_every(60).jobs.values(), broker, grace=10)
        ticker._clock = shifted_clock(broker, (int(time.time()) // 60 + 5) * 60 + 1)
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.published == 1)
        ticker.stop()
        await task
        assert failures == 0
        assert ticker.stats.failed == 0
        assert len(await received_slots(broker)) == 1

    async def test_a_slot_that_cannot_be_published_in_grace_is_reported(
        self, queue_name: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        class Down(MemoryBroker):
            async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
                raise BrokerError("no servers available")

        broker = await synced(Down(MemorySettings(queue_name, dedup_window=30)))
        ticker = Ticker(app_every(1).jobs.values(), broker, grace=0.5)
        task = asyncio.create_task(ticker.run())
        with caplog.at_level(logging.ERROR, "framework_m.ticker"):
            await wait_until(lambda: ticker.stats.failed >= 1)
        ticker.stop()
        await task
        assert "not enqueued within grace 0.5s: no servers available" in caplog.text

    async def test_no_slot_is_published_after_stop(self, memory: MemoryBroker) -> None:
        ticker = Ticker(app_every(1).jobs.values(), memory, grace=2)
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.published >= 1)
        ticker.stop()
        await task
        count = ticker.stats.published
        await asyncio.sleep(1.2)  # a slot boundary passes
        assert ticker.stats.published == count
        assert len(await received_slots(memory)) == count


class TestFaults:
    async def test_after_an_outage_only_the_latest_slot_is_enqueued(
        self, queue_name: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        broker = await synced(Outage(MemorySettings(queue_name, dedup_window=60)))
        broker.down = True
        ticker = Ticker(app_every(1).jobs.values(), broker, grace=10)
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.skipped >= 3, timeout=10)  # slots missed
        broker.down = False
        await wait_until(lambda: ticker.stats.published >= 1)
        back = time.time()
        ticker.stop()
        await task
        slots = await received_slots(broker)
        assert ticker.stats.failed == 0
        # The outage's slots gave way to the latest: no burst of old slots when it ended.
        assert all(s >= back - 2.5 for s in slots), (slots, back)
        assert "a later slot is due and is enqueued instead" in caplog.text

    async def test_a_publish_that_never_answers_is_given_up_within_grace_as_unknown(
        self, queue_name: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        calls: list[float] = []

        class Hanging(MemoryBroker):
            async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
                calls.append(time.monotonic())
                await super()._publish(message, body)  # stored, then the answer is lost
                await asyncio.Event().wait()
                raise AssertionError("unreachable")

        broker = await synced(Hanging(MemorySettings(queue_name, dedup_window=60)))
        ticker = Ticker(app_every(60).jobs.values(), broker, grace=1)
        ticker._clock = shifted_clock(broker, (int(time.time()) // 60 + 5) * 60 + 0.2)
        task = asyncio.create_task(ticker.run())
        with caplog.at_level(logging.ERROR, "framework_m.ticker"):
            await wait_until(lambda: ticker.stats.unknown == 1, timeout=5)
        assert len(calls) == 1
        assert time.monotonic() - calls[0] < 1.5  # bounded by the grace left, not hanging
        ticker.stop()
        await task
        assert (ticker.stats.failed, ticker.stats.unanswered) == (0, 1)
        assert "outcome unknown, no answer from the broker within grace 1s" in caplog.text
        assert "not enqueued" not in caplog.text
        assert len(await received_slots(broker)) == 1

    async def test_a_timeout_then_an_error_is_still_unknown(self, queue_name: str) -> None:
        class TimeoutThenDown(MemoryBroker):
            calls = 0

            async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
                self.calls += 1
                if self.calls == 1:
                    await super()._publish(message, body)
                    raise TimeoutError
                raise BrokerError("connection lost")

        broker = await synced(TimeoutThenDown(MemorySettings(queue_name, dedup_window=60)))
        ticker = Ticker(app_every(60).jobs.values(), broker, grace=1)
        ticker._clock = shifted_clock(broker, (int(time.time()) // 60 + 5) * 60 + 0.2)
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.unknown + ticker.stats.failed == 1, timeout=5)
        ticker.stop()
        await task
        assert broker.calls >= 2
        assert (ticker.stats.unknown, ticker.stats.failed) == (1, 0)

    async def test_a_slot_given_up_at_stop_says_the_ticker_stopped(
        self, queue_name: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        entered = asyncio.Event()

        class Refusing(MemoryBroker):
            async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
                entered.set()
                raise BrokerError("channel closed")

        broker = await synced(Refusing(MemorySettings(queue_name, dedup_window=60)))
        ticker = Ticker(app_every(60).jobs.values(), broker, grace=30)
        ticker._clock = shifted_clock(broker, (int(time.time()) // 60 + 5) * 60 + 0.2)
        task = asyncio.create_task(ticker.run())
        with caplog.at_level(logging.ERROR, "framework_m.ticker"):
            await asyncio.wait_for(entered.wait(), 5)
            ticker.stop()
            await task
        assert ticker.stats.failed == 1
        assert "not enqueued before the ticker stopped (slot 0." in caplog.text
        assert "within grace" not in caplog.text

    async def test_a_tick_says_how_late_it_may_still_be_stored(self, memory: MemoryBroker) -> None:
        ticker = Ticker(app_every(1).jobs.values(), memory, grace=2, clock_skew=1)
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.published >= 1)
        ticker.stop()
        await task
        [first, *_] = [decode_message(d.body) for d in await receive_all(memory, quiet=0.2)]
        assert first.scheduled_at is not None
        assert first.not_after == first.scheduled_at + 2 + 1


class TestClockCheck:
    async def test_a_clock_off_by_more_than_the_skew_is_reported_and_ticks_on(
        self, memory: MemoryBroker, caplog: pytest.LogCaptureFixture
    ) -> None:
        memory.clock = lambda: time.time() + 12  # the broker's clock: 12 s ahead of this one
        ticker = Ticker(app_every(1).jobs.values(), memory, grace=2, clock_skew=5)
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.published >= 2)
        ticker.stop()
        await task
        assert "this clock is 12.0s behind the broker's, more than --clock-skew 5s" in caplog.text
        assert ticker.stats.clock_held == 0

    async def test_past_what_the_window_allows_it_stops_ticking_until_the_clock_is_back(
        self,
        memory: MemoryBroker,
        caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        monkeypatch.setattr(ticker_module, "CHECK_EVERY", 0.5)
        monkeypatch.setattr(clocks, "CHECK_EVERY", 0.5)
        offset = -200.0
        memory.clock = lambda: time.time() + offset  # this clock: 200 s ahead of the broker's
        ticker = Ticker(app_every(1).jobs.values(), memory, grace=2)
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.clock_held >= 3)
        assert ticker.stats.published == 0
        assert await received_slots(memory) == []
        limit = (memory.dedup_window - 2) / 2
        assert (
            f"this clock is 200.0s ahead of the broker's, more than the {limit:g}s" in caplog.text
        )
        assert "not ticking" in caplog.text
        offset = 0.0  # time sync fixed it
        await wait_until(lambda: ticker.stats.published >= 1)
        ticker.stop()
        await task
        assert "ticking again" in caplog.text

    async def test_a_broker_without_a_clock_is_said_once(
        self, memory: MemoryBroker, caplog: pytest.LogCaptureFixture
    ) -> None:
        async def no_clock() -> None:
            return None

        memory.server_time = no_clock  # type: ignore[method-assign]
        ticker = Ticker(app_every(1).jobs.values(), memory, grace=2)
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.published >= 1)
        ticker.stop()
        await task
        assert caplog.text.count("the broker exposes no clock") == 1
        assert ticker.clock_check is not None
        assert ticker.clock_check.offset is None


async def test_a_ticker_started_between_slots_fires_each_later_slot_once() -> None:
    app = app_every(900)
    start = datetime(2026, 5, 1, 10, 7, tzinfo=UTC)  # 7 minutes past a slot: inside no grace
    ticks = await ticks_between(app, start, start + timedelta(hours=1))
    assert [t.slot.strftime("%H:%M") for t in ticks] == ["10:15", "10:30", "10:45", "11:00"]
    assert [t.deduplication_id for t in ticks] == [
        f"tick:tick:{int(t.slot.timestamp())}" for t in ticks
    ]


def app_catching_up(seconds: int, window: float, catchup: str = "latest") -> App:
    app = App()

    @app.job(every=seconds, catchup_window=window, catchup=catchup)  # type: ignore[arg-type]
    async def tick(ctx: JobContext) -> None: ...

    return app


async def record(broker: MemoryBroker, **fields: object) -> None:
    await steering.change(broker, "tick", lambda s: dataclasses.replace(s, **fields))  # type: ignore[arg-type]


async def run_until_settled(ticker: Ticker, done: Callable[[], bool]) -> None:
    task = asyncio.create_task(ticker.run())
    await wait_until(done, timeout=10)
    ticker.stop()
    await task


class TestCatchUp:
    """A slot no replica enqueued in time, inside ``catchup_window``, is enqueued late once."""

    @staticmethod
    def boundary() -> int:
        return (int(time.time()) // 600 + 5) * 600

    async def test_the_first_replica_back_enqueues_the_latest_missed_slot_once(
        self, queue_name: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        broker = await synced(MemoryBroker(MemorySettings(queue_name, dedup_window=3)))
        b = self.boundary()
        await record(broker, latest_slot=b - 50)
        jobs = app_catching_up(10, 600).jobs.values()
        first = Ticker(jobs, broker, grace=1, clock_skew=0.5, clock=shifted_clock(broker, b + 5))
        caplog.set_level(logging.INFO, logger="framework_m")
        await run_until_settled(first, lambda: first.stats.caught_up == 1)
        assert await received_slots(broker) == [b]  # the latest missed slot, not the 4 before
        assert first.stats.skipped == 4  # superseded by it, and said so
        assert "superseded by missed slot" in caplog.text
        assert (await steering.read(broker, "tick")).latest_slot == b
        # Past the dedup window (3 s) and before the next slot: the record says it is done.
        second = Ticker(jobs, broker, grace=1, clock_skew=0.5, clock=shifted_clock(broker, b + 9))
        task = asyncio.create_task(second.run())
        s = second.stats
        await wait_until(lambda: "no missed slot" in caplog.text or s.caught_up + s.duplicates > 0)
        second.stop()
        await task
        assert second.stats.caught_up == second.stats.published == 0
        assert second.stats.duplicates == 0  # not even tried: the record bounds the search
        assert await received_slots(broker) == []

    async def test_all_enqueues_each_missed_slot_oldest_first_then_the_due_one(
        self, memory: MemoryBroker
    ) -> None:
        b = self.boundary()
        await record(memory, latest_slot=b - 40)
        ticker = Ticker(
            app_catching_up(10, 600, "all").jobs.values(),
            memory,
            grace=2,
            clock=shifted_clock(memory, b + 0.5),
        )
        await run_until_settled(ticker, lambda: ticker.stats.published == 1)
        messages = [decode_message(d.body) for d in await receive_all(memory)]
        assert [m.scheduled_at for m in messages] == [b - 30, b - 20, b - 10, b]
        assert [caught_up(m) for m in messages] == [True, True, True, False]  # wait, not skip
        assert ticker.stats.caught_up == 3
        assert (await steering.read(memory, "tick")).latest_slot == b

    async def test_latest_gives_way_to_a_due_slot(self, memory: MemoryBroker) -> None:
        b = self.boundary()
        await record(memory, latest_slot=b - 40)
        ticker = Ticker(
            app_catching_up(10, 600).jobs.values(),
            memory,
            grace=2,
            clock=shifted_clock(memory, b + 0.5),
        )
        await run_until_settled(ticker, lambda: ticker.stats.published == 1)
        assert await received_slots(memory) == [b]
        assert ticker.stats.caught_up == 0

    async def test_only_the_window_the_record_and_the_pause_bound_what_runs_late(
        self, memory: MemoryBroker
    ) -> None:
        b = self.boundary()
        jobs = app_catching_up(10, 45, "all").jobs.values()
        await record(memory, latest_slot=b - 100)
        ticker = Ticker(jobs, memory, grace=1, clock=shifted_clock(memory, b + 5))
        await run_until_settled(ticker, lambda: ticker.stats.caught_up == 4)
        assert await received_slots(memory) == [b - 30, b - 20, b - 10, b]  # > now - 45 s
        assert ticker.stats.failed == 0  # the older ones were not even tried
        # A pause (ended at b + 25) and a resume (at b + 78) hold their slots back for good.
        await record(memory, latest_slot=b, paused=True, paused_until=b + 25)
        ticker = Ticker(jobs, memory, grace=1, clock=shifted_clock(memory, b + 45))
        await run_until_settled(ticker, lambda: ticker.stats.caught_up == 2)
        assert await received_slots(memory) == [b + 30, b + 40]
        await record(memory, latest_slot=b + 40, paused=False, paused_until=None, resumed_at=b + 78)
        ticker = Ticker(jobs, memory, grace=1, clock=shifted_clock(memory, b + 105))
        await run_until_settled(ticker, lambda: ticker.stats.caught_up == 3)
        assert await received_slots(memory) == [b + 80, b + 90, b + 100]

    async def test_a_new_schedule_catches_up_nothing(self, memory: MemoryBroker) -> None:
        b = self.boundary()
        ticker = Ticker(
            app_catching_up(10, 600).jobs.values(),
            memory,
            grace=1,
            clock=shifted_clock(memory, b + 8.5),
        )
        await run_until_settled(ticker, lambda: ticker.stats.published == 1)  # slot b + 10
        assert await received_slots(memory) == [b + 10]
        assert ticker.stats.caught_up == 0

    async def test_a_slot_the_broker_refused_past_grace_is_enqueued_when_it_is_back(
        self, queue_name: str
    ) -> None:
        broker = await synced(Outage(MemorySettings(queue_name, dedup_window=60)))
        broker.down = True
        b = self.boundary()
        ticker = Ticker(
            app_catching_up(60, 600).jobs.values(),
            broker,
            grace=1,
            clock=shifted_clock(broker, b - 0.3),
        )
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker._clock() > b + 1.5, timeout=5)  # slot b is past grace
        assert ticker.stats.failed == 0
        broker.down = False
        await wait_until(lambda: ticker.stats.caught_up == 1, timeout=5)
        ticker.stop()
        await task
        assert await received_slots(broker) == [b]
        assert (await steering.read(broker, "tick")).latest_slot == b

    async def test_a_missed_slot_another_replica_recorded_meanwhile_is_not_published(
        self, queue_name: str
    ) -> None:
        broker = await synced(Outage(MemorySettings(queue_name, dedup_window=60)))
        broker.down = True
        b = self.boundary()
        ticker = Ticker(
            app_catching_up(60, 600).jobs.values(),
            broker,
            grace=1,
            clock=shifted_clock(broker, b - 0.3),
        )
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker._clock() > b + 1.5, timeout=5)  # slot b is past grace
        await record(broker, latest_slot=b)  # as a replica that reached the broker would
        broker.down = False
        await wait_until(lambda: ticker.stats.duplicates == 1, timeout=5)
        ticker.stop()
        await task
        assert await received_slots(broker) == []
        assert ticker.stats.caught_up == 0

    async def test_a_broker_without_shared_state_is_refused(self, queue_name: str) -> None:
        class Stateless(MemoryBroker):
            capabilities = MemoryBroker.capabilities - {Capability.STORE}

        broker = await synced(Stateless(MemorySettings(queue_name, dedup_window=60)))
        ticker = Ticker(app_catching_up(10, 600).jobs.values(), broker, grace=1)
        with pytest.raises(ConfigurationError, match="catchup_window"):
            ticker.check()

    @pytest.mark.parametrize(
        ("options", "message"),
        [
            ({"every": 10, "catchup_window": 0}, "catchup_window must be > 0"),
            ({"every": 10, "catchup_window": float("inf")}, "catchup_window must be > 0"),
            ({"every": 10, "catchup_window": "1h"}, "catchup_window must be > 0"),
            ({"catchup_window": 60}, "for scheduled jobs"),
            ({"every": 10, "catchup_window": 60, "catchup": "some"}, "catchup must be one of"),
        ],
    )
    def test_bad_catch_up_options_are_refused_at_definition(
        self, options: dict[str, object], message: str
    ) -> None:
        with pytest.raises(JobDefinitionError, match=message):
            app_with(options)

    def test_a_timedelta_window_is_seconds(self) -> None:
        app = App()

        @app.job(every=10, catchup_window=timedelta(minutes=10))
        async def tick(ctx: JobContext) -> None: ...

        assert app.jobs["tick"].catchup_window == 600


def app_with(options: dict[str, object]) -> App:
    app = App()

    async def tick(ctx: JobContext) -> None: ...

    app.job(**options)(tick)  # type: ignore[call-overload]
    return app

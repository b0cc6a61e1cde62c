from __future__ import annotations

import asyncio
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
    InProcessTickerAdapter,
    JobContext,
    JobMessage,
    PublishResult,
    decode_message,
)
from framework_m_core.adapters.memory import MemoryBroker, MemorySettings
from framework_m_core.scheduling import clocks
from framework_m_core.scheduling import ticker as ticker_module
from framework_m_core.scheduling.ticker import check_grace, default_grace
from framework_m_core.testing import receive_all, synced, ticks_between, wait_until

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


async def slots_on(broker: MemoryBroker) -> list[int]:
    out = []
    for d in await receive_all(broker, quiet=0.2):
        slot = decode_message(d.body).scheduled_at
        assert slot is not None
        out.append(slot)
    return out


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
        InProcessTickerAdapter(app.jobs.values(), broker, grace=4, clock_skew=5).check()
        ticker = InProcessTickerAdapter(app.jobs.values(), broker, grace=6, clock_skew=5)
        with pytest.raises(ConfigurationError, match="dedup window of 10s"):
            ticker.check()
        with pytest.raises(ConfigurationError):
            await ticker.run()
        assert await slots_on(broker) == []


class TestStartup:
    async def test_fires_only_the_latest_slot_inside_grace(self, memory: MemoryBroker) -> None:
        boundary = (int(time.time()) // 60 + 5) * 60
        # 27 s after a minute boundary: slots of every 5 s at -2, -7, ... -27 are all in grace.
        ticker = InProcessTickerAdapter(
            app_every(5).jobs.values(),
            memory,
            grace=29,
            clock=shifted_clock(memory, boundary + 27.5),
        )
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.published == 1)
        ticker.stop()
        await task
        assert await slots_on(memory) == [boundary + 25]

    async def test_fires_nothing_when_the_last_slot_is_older_than_grace(
        self, memory: MemoryBroker
    ) -> None:
        boundary = (int(time.time()) // 60 + 5) * 60
        ticker = InProcessTickerAdapter(
            app_every(60).jobs.values(),
            memory,
            grace=30,
            clock=shifted_clock(memory, boundary + 31),
        )
        task = asyncio.create_task(ticker.run())
        await asyncio.sleep(0.3)  # the ticker decides at start; give it the chance to misbehave
        ticker.stop()
        await task
        assert await slots_on(memory) == []
        assert ticker.stats.published == 0


class TestRunning:
    async def test_each_second_is_enqueued_once_with_its_slot(self, memory: MemoryBroker) -> None:
        ticker = InProcessTickerAdapter(app_every(1).jobs.values(), memory, grace=2)
        started = time.time()
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.published >= 4, timeout=8)
        ticker.stop()
        await task
        slots = await slots_on(memory)
        assert slots == list(range(slots[0], slots[0] + len(slots)))
        assert slots[0] >= int(started) - 2
        for d in await memory.dead_letters():
            pytest.fail(f"unexpected dead letter {d}")

    async def test_dedup_ids_are_tick_job_slot(self, memory: MemoryBroker) -> None:
        ticker = InProcessTickerAdapter(app_every(1).jobs.values(), memory, grace=2)
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
        ticker = InProcessTickerAdapter(app.jobs.values(), memory, grace=3, clock=clock)
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.published >= 1)
        jump = 86_400.0  # a day-long stall (a suspended VM)
        await wait_until(lambda: ticker.stats.skipped > 0)
        ticker.stop()
        await task
        assert counted - 2 <= ticker.stats.skipped <= counted + 2
        [found] = re.findall(
            r"tick: (\d+\+?) slot\(s\) from \S+ on were not enqueued: older", caplog.text
        )
        if says.endswith("+"):
            assert found == says
        else:
            assert abs(int(found) - int(says)) <= 2

    async def test_clock_jump_skips_slots_older_than_grace(
        self, memory: MemoryBroker, caplog: pytest.LogCaptureFixture
    ) -> None:
        jump = 0.0

        def clock() -> float:
            return time.time() + jump

        memory.clock = clock  # the machine's clock jumps: the broker's with it
        ticker = InProcessTickerAdapter(app_every(1).jobs.values(), memory, grace=3, clock=clock)
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.published >= 1)
        before = ticker.stats.published
        jump = 100.0
        await wait_until(lambda: ticker.stats.skipped > 0)
        await wait_until(lambda: ticker.stats.published >= before + 3)
        ticker.stop()
        await task
        assert 90 <= ticker.stats.skipped <= 100
        slots = await slots_on(memory)
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
        ticker = InProcessTickerAdapter(app_every(60).jobs.values(), broker, grace=10)
        ticker._clock = shifted_clock(broker, (int(time.time()) // 60 + 5) * 60 + 1)
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.published == 1)
        ticker.stop()
        await task
        assert failures == 0
        assert ticker.stats.failed == 0
        assert len(await slots_on(broker)) == 1

    async def test_a_slot_that_cannot_be_published_in_grace_is_reported(
        self, queue_name: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        class Down(MemoryBroker):
            async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
                raise BrokerError("no servers available")

        broker = await synced(Down(MemorySettings(queue_name, dedup_window=30)))
        ticker = InProcessTickerAdapter(app_every(1).jobs.values(), broker, grace=0.5)
        task = asyncio.create_task(ticker.run())
        with caplog.at_level(logging.ERROR, "framework_m.ticker"):
            await wait_until(lambda: ticker.stats.failed >= 1)
        ticker.stop()
        await task
        assert "not enqueued within grace 0.5s: no servers available" in caplog.text

    async def test_no_slot_is_published_after_stop(self, memory: MemoryBroker) -> None:
        ticker = InProcessTickerAdapter(app_every(1).jobs.values(), memory, grace=2)
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.published >= 1)
        ticker.stop()
        await task
        count = ticker.stats.published
        await asyncio.sleep(1.2)  # a slot boundary passes
        assert ticker.stats.published == count
        assert len(await slots_on(memory)) == count


class TestFaults:
    async def test_after_an_outage_only_the_latest_slot_is_enqueued(
        self, queue_name: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        down = True

        class Outage(MemoryBroker):
            async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
                if down:
                    raise BrokerError("connection refused")
                return await super()._publish(message, body)

        broker = await synced(Outage(MemorySettings(queue_name, dedup_window=60)))
        ticker = InProcessTickerAdapter(app_every(1).jobs.values(), broker, grace=10)
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.skipped >= 3, timeout=10)  # slots missed
        down = False
        await wait_until(lambda: ticker.stats.published >= 1)
        back = time.time()
        ticker.stop()
        await task
        slots = await slots_on(broker)
        assert ticker.stats.failed == 0
        # The outage's slots gave way to the latest: no burst of old slots when it ended.
        assert all(s >= back - 2.5 for s in slots), (slots, back)
        assert "a later slot is due and is enqueued instead" in caplog.text

    async def test_a_publish_that_never_answers_is_given_up_within_grace(
        self, queue_name: str
    ) -> None:
        calls: list[float] = []

        class Hanging(MemoryBroker):
            async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
                calls.append(time.monotonic())
                await asyncio.Event().wait()  # a paused server
                raise AssertionError("unreachable")

        broker = await synced(Hanging(MemorySettings(queue_name, dedup_window=60)))
        ticker = InProcessTickerAdapter(app_every(60).jobs.values(), broker, grace=1)
        ticker._clock = shifted_clock(broker, (int(time.time()) // 60 + 5) * 60 + 0.2)
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.failed == 1, timeout=5)
        assert len(calls) == 1
        assert time.monotonic() - calls[0] < 1.5  # bounded by the grace left, not hanging
        ticker.stop()
        await task

    async def test_a_tick_says_how_late_it_may_still_be_stored(self, memory: MemoryBroker) -> None:
        ticker = InProcessTickerAdapter(app_every(1).jobs.values(), memory, grace=2, clock_skew=1)
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
        ticker = InProcessTickerAdapter(app_every(1).jobs.values(), memory, grace=2, clock_skew=5)
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
        ticker = InProcessTickerAdapter(app_every(1).jobs.values(), memory, grace=2)
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: ticker.stats.clock_held >= 3)
        assert ticker.stats.published == 0
        assert await slots_on(memory) == []
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
        ticker = InProcessTickerAdapter(app_every(1).jobs.values(), memory, grace=2)
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

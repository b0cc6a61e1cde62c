"""Runtime schedules on memory://: stored in buckets, followed by tickers, validated."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from framework_m_core import App, JobContext, Ticker
from framework_m_core.adapters.memory import MemoryBroker, MemorySettings
from framework_m_core.control import keys, runtime_schedules, steering
from framework_m_core.control.runtime_schedules import (
    BUCKETS,
    bucket_of,
    decode_catalog,
    runtime_schedule,
)
from framework_m_core.control.shared import shared
from framework_m_core.errors import ConfigurationError, ScheduleError
from framework_m_core.ports import decode_message
from framework_m_core.testing import receive_all, synced, wait_until
from framework_m_core.testing.passing import DeafStore

pytestmark = pytest.mark.anyio


def report(schedule_id: str = "tenant-1", **options: object) -> runtime_schedules.RuntimeSchedule:
    options.setdefault("every_seconds", 1)
    return runtime_schedule(schedule_id, "report", **options)  # type: ignore[arg-type]


async def test_set_list_replace_and_delete(memory: MemoryBroker) -> None:
    assert await runtime_schedules.list_schedules(memory) == []
    one = report("tenant-1", kwargs={"tenant": 1})
    two = report("tenant-2", cron_expression="0 9 * * *", tz="Europe/Berlin", every_seconds=None)
    await runtime_schedules.set_schedule(memory, one)
    await runtime_schedules.set_schedule(memory, two)
    assert await runtime_schedules.list_schedules(memory) == [one, two]
    changed = report("tenant-1", every_seconds=5, kwargs={"tenant": 1, "full": True})
    await runtime_schedules.set_schedule(memory, changed)
    assert await runtime_schedules.list_schedules(memory) == [changed, two]
    assert await runtime_schedules.delete_schedule(memory, "tenant-1") is True
    assert await runtime_schedules.delete_schedule(memory, "tenant-1") is False
    assert await runtime_schedules.list_schedules(memory) == [two]
    catalog = await runtime_schedules.read_catalog(memory)
    assert catalog.counter == 4  # three sets and one delete
    assert catalog.used == {bucket_of("tenant-2")}


async def test_many_schedules_spread_over_buckets_and_all_come_back(memory: MemoryBroker) -> None:
    schedules = [report(f"t{i}", kwargs={"n": i}) for i in range(300)]
    for s in schedules:
        await runtime_schedules.set_schedule(memory, s)
    assert await runtime_schedules.list_schedules(memory) == sorted(schedules, key=lambda s: s.id)
    catalog = await runtime_schedules.read_catalog(memory)
    assert len(catalog.used) > 200  # spread, not piled in a few records
    assert catalog.changed_since(0) is None  # 300 changes: more than the catalog lists
    assert catalog.changed_since(catalog.counter - 3) == {bucket_of(s.id) for s in schedules[-3:]}


async def test_writers_at_once_lose_no_schedule(memory: MemoryBroker) -> None:
    schedules = [report(f"race-{i}") for i in range(40)]
    await asyncio.gather(*(runtime_schedules.set_schedule(memory, s) for s in schedules))
    assert len(await runtime_schedules.list_schedules(memory)) == 40
    await asyncio.gather(*(runtime_schedules.delete_schedule(memory, s.id) for s in schedules[:20]))
    assert [s.id for s in await runtime_schedules.list_schedules(memory)] == sorted(
        s.id for s in schedules[20:]
    )


@pytest.mark.parametrize(
    ("args", "error", "why"),
    [
        ({"schedule_id": "bad id"}, ConfigurationError, "invalid schedule id"),
        ({"schedule_id": "@x"}, ConfigurationError, "invalid schedule id"),
        ({"job": "no:colons"}, ConfigurationError, "invalid job name"),
        ({"every_seconds": None}, ConfigurationError, "exactly one"),
        ({"cron_expression": "* * *"}, ConfigurationError, "exactly one"),
        ({"every_seconds": None, "cron_expression": "61 * * * *"}, ScheduleError, "61"),
        ({"every_seconds": None, "cron_expression": "0 9 * * *", "tz": "Mars/Base"},
         ScheduleError, "Mars/Base"),
        ({"tz": "UTC"}, ScheduleError, "zone applies to cron"),
        ({"kwargs": {"x": float("nan")}}, ConfigurationError, "JSON"),
        ({"kwargs": {"x": "y" * 3000}}, ConfigurationError, "2048 bytes"),
    ],
)  # fmt: skip
def test_a_bad_runtime_schedule_is_refused_with_why(
    args: dict[str, object], error: type[Exception], why: str
) -> None:
    options: dict[str, object] = {"schedule_id": "t", "job": "report", "every_seconds": 1}
    options.update(args)
    with pytest.raises(error, match=why):
        runtime_schedule(**options)  # type: ignore[arg-type]


async def test_malformed_records_are_skipped_with_a_warning(
    memory: MemoryBroker, caplog: pytest.LogCaptureFixture
) -> None:
    good = report("good")
    await runtime_schedules.set_schedule(memory, good)
    n = bucket_of("good")
    entry = await shared(memory).read_state(keys.runtime_bucket(n))
    assert entry is not None
    body = json.loads(entry.value)
    body["evil"] = {"job": "report", "every": "1"}  # the wrong bucket, and not an int
    body["good2"] = {"job": "report", "every": 0}
    await shared(memory).write_state(
        keys.runtime_bucket(n), json.dumps(body).encode(), version=entry.version
    )
    with caplog.at_level(logging.WARNING, logger="framework_m"):
        assert await runtime_schedules.list_schedules(memory) == [good]
    assert "'evil' is malformed" in caplog.text
    assert "'good2' is malformed" in caplog.text
    with pytest.raises(Exception, match="catalog is malformed"):
        decode_catalog(b'{"counter": 1, "changes": [[1, 5000]], "used": ""}')


def _app() -> App:
    app = App()

    @app.job
    async def report(ctx: JobContext, tenant: int = 0) -> None: ...

    return app


async def _runs(broker: MemoryBroker) -> list[tuple[str | None, int, dict[str, object]]]:
    out = []
    for d in await receive_all(broker, quiet=0.2):
        m = decode_message(d.body)
        assert m.scheduled_at is not None
        out.append((m.deduplication_id, m.scheduled_at, dict(m.kwargs)))
    return out


async def test_tickers_follow_set_change_and_delete_within_seconds(
    memory: MemoryBroker, caplog: pytest.LogCaptureFixture
) -> None:
    tickers = [Ticker(_app().jobs.values(), memory, grace=2) for _ in range(2)]
    caplog.set_level(logging.INFO, logger="framework_m")
    tasks = [asyncio.create_task(t.run()) for t in tickers]
    await runtime_schedules.set_schedule(memory, report("t1", kwargs={"tenant": 1}))
    await wait_until(lambda: sum(t.stats.published for t in tickers) >= 2, timeout=5)
    await runtime_schedules.set_schedule(
        memory, report("t1", every_seconds=2, kwargs={"tenant": 2})
    )
    await wait_until(lambda: caplog.text.count("runtime schedule t1 changed") == 2, timeout=5)
    before = await _runs(memory)
    await wait_until(lambda: sum(t.stats.published for t in tickers) >= len(before) + 2, 10)
    after = await _runs(memory)
    await runtime_schedules.delete_schedule(memory, "t1")
    await wait_until(lambda: caplog.text.count("t1 deleted: no longer ticked") == 2, timeout=5)
    await _runs(memory)  # what was enqueued before the delete was seen
    published = sum(t.stats.published for t in tickers)
    await asyncio.sleep(2.5)  # an absence needs time to show: two slots of the old version
    for t in tickers:
        t.stop()
    await asyncio.gather(*tasks)
    assert sum(t.stats.published for t in tickers) == published
    assert await _runs(memory) == []
    dedups = [d for d, _, _ in before + after]
    assert len(dedups) == len(set(dedups)), "a slot was enqueued twice"
    assert all(d is not None and d.startswith("tick:@t1:") for d in dedups)
    assert {k["tenant"] for _, _, k in before} <= {1, 2}
    assert all(k == {"tenant": 2} and s % 2 == 0 for _, s, k in after)


async def test_a_watch_brings_a_change_at_once(
    queue_name: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = MemorySettings(queue_name, dedup_window=120.0, visibility_timeout=5.0)
    broker = await synced(MemoryBroker(settings))
    monkeypatch.setattr(runtime_schedules, "POLL", 30.0)  # a change comes long before a read would
    ticker = Ticker(_app().jobs.values(), broker, grace=2)
    caplog.set_level(logging.INFO, logger="framework_m")
    task = asyncio.create_task(ticker.run())
    await wait_until(lambda: "ticker started" in caplog.text, timeout=5)
    for every, said in ((5, "ticked"), (7, "changed")):
        await runtime_schedules.set_schedule(broker, report("w", every_seconds=every))
        line = f"runtime schedule w {said}: every {every}s"
        await wait_until(lambda line=line: line in caplog.text, timeout=5)  # type: ignore[misc]
    await runtime_schedules.delete_schedule(broker, "w")
    await wait_until(lambda: "w deleted: no longer ticked" in caplog.text, timeout=5)
    ticker.stop()
    await task


async def test_a_stopped_ticker_ends_though_its_broker_ate_the_follower_cancel(
    queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime_schedules, "POLL", 0.5)
    broker = await synced(MemoryBroker(MemorySettings(queue_name, 120.0, 5.0)))
    broker._store = deaf = DeafStore(broker._store)  # type: ignore[assignment]
    app = _app()

    @app.job(every=1)
    async def beat(ctx: JobContext) -> None: ...

    ticker = Ticker(app.jobs.values(), broker, grace=2)
    task = asyncio.create_task(ticker.run())
    await wait_until(lambda: deaf.waits >= 2, timeout=10)  # the follower waits
    ticker.stop()
    async with asyncio.timeout(10):  # it ends at its next turn, within a poll
        await task


async def test_a_schedule_of_a_job_the_app_lacks_is_not_ticked(
    memory: MemoryBroker, caplog: pytest.LogCaptureFixture
) -> None:
    await runtime_schedules.set_schedule(
        memory, runtime_schedule("x", "elsewhere", every_seconds=1)
    )
    ticker = Ticker(_app().jobs.values(), memory, grace=2)
    with caplog.at_level(logging.WARNING, logger="framework_m"):
        task = asyncio.create_task(ticker.run())
        await wait_until(lambda: "which this app does not have" in caplog.text, timeout=5)
        await asyncio.sleep(1.2)  # a slot passes: nothing may be enqueued
        ticker.stop()
        await task
    assert ticker.stats.published == 0
    assert caplog.text.count("which this app does not have") == 1  # said once


def test_buckets_fit_the_state_port() -> None:
    assert BUCKETS % 8 == 0
    assert keys.runtime_bucket(0) != keys.RUNTIME_CATALOG


async def test_a_runtime_schedule_is_paused_resumed_and_triggered_by_its_name(
    memory: MemoryBroker,
) -> None:
    await runtime_schedules.set_schedule(memory, report("t9", kwargs={"tenant": 9}))
    await steering.pause(memory, "@t9", reason="tenant on hold")
    ticker = Ticker(_app().jobs.values(), memory, grace=2)
    task = asyncio.create_task(ticker.run())
    await wait_until(lambda: ticker.stats.paused >= 2, timeout=10)
    assert ticker.stats.published == 0
    job_id = await steering.trigger(memory, "@t9", {"extra": True})
    [(dedup, _, kwargs)] = await _runs(memory)
    assert dedup is not None
    assert dedup.startswith("trigger:@t9:")
    assert kwargs == {"tenant": 9, "extra": True}
    assert job_id
    await steering.resume(memory, "@t9")
    await wait_until(lambda: ticker.stats.published >= 1, timeout=10)
    ticker.stop()
    await task
    runs = await _runs(memory)
    assert runs
    assert all(d is not None and d.startswith("tick:@t9:") for d, _, _ in runs)
    assert all(k == {"tenant": 9} for _, _, k in runs)

"""The Prometheus observer: what a worker's jobs and ticks add up to, by job and outcome."""

from __future__ import annotations

import asyncio
import time

import pytest

from framework_m_core import App, JobContext, Ticker
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.control import steering
from framework_m_core.observability.metrics import Metrics
from framework_m_core.testing import running_worker, wait_until

pytestmark = pytest.mark.anyio


def value(text: str, sample: str) -> float:
    [line] = [x for x in text.splitlines() if x.startswith(sample + " ")]
    return float(line.rsplit(" ", 1)[1])


async def test_jobs_are_counted_by_job_and_outcome(memory: MemoryBroker) -> None:
    app, metrics = App(backoff=0.01), Metrics(concurrency=4)

    @app.job
    async def ok(ctx: JobContext) -> None: ...

    @app.job(max_attempts=2)
    async def broken(ctx: JobContext) -> None:
        raise RuntimeError("no")

    for _ in range(3):
        await memory.enqueue("ok")
    await memory.enqueue("broken")
    await memory.enqueue("nobody_knows_me")
    await memory.requeue(b"not json")
    async with running_worker(app, memory, observer=metrics) as worker:
        await wait_until(lambda: worker.stats.dead_lettered == 3)
        await wait_until(lambda: worker.stats.succeeded == 3)
    text = metrics.exposition().decode()
    assert value(text, 'frameworkm_jobs_total{job_name="ok",outcome="succeeded"}') == 3
    assert value(text, 'frameworkm_jobs_total{job_name="broken",outcome="retried"}') == 1
    assert value(text, 'frameworkm_jobs_total{job_name="broken",outcome="dead_lettered"}') == 1
    assert value(text, 'frameworkm_jobs_total{job_name="unknown",outcome="dead_lettered"}') == 2
    assert value(text, 'frameworkm_jobs_started_total{job_name="broken"}') == 2
    assert value(text, 'frameworkm_job_duration_seconds_count{job_name="ok"}') == 3
    assert value(text, 'frameworkm_job_start_delay_seconds_count{job_name="ok"}') == 3
    assert value(text, "frameworkm_jobs_running") == 0
    assert value(text, "frameworkm_concurrency") == 4
    assert "nobody_knows_me" not in text  # names from messages never become labels


async def test_ticks_and_the_last_slot_are_recorded(memory: MemoryBroker) -> None:
    app, metrics = App(), Metrics(concurrency=1)

    @app.job(every=1)
    async def tick(ctx: JobContext) -> None: ...

    ticker = Ticker(app.jobs.values(), memory, grace=2, observer=metrics)
    async with running_worker(app, memory, ticker=ticker, observer=metrics) as worker:
        await wait_until(lambda: worker.stats.succeeded >= 2, timeout=10)
    text = metrics.exposition().decode()
    enqueued = value(text, 'frameworkm_ticks_total{outcome="enqueued",schedule="tick"}')
    assert enqueued == ticker.stats.published >= 2
    last = value(text, 'frameworkm_tick_last_slot_timestamp_seconds{schedule="tick"}')
    assert last == int(last)
    assert time.time() - 5 < last <= time.time()
    assert value(text, 'frameworkm_job_slot_lag_seconds_count{job_name="tick"}') >= 2


async def test_the_next_slot_of_each_schedule_moves_on_as_the_ticker_ticks(
    memory: MemoryBroker,
) -> None:
    app, metrics = App(), Metrics(concurrency=1)

    @app.job(every=1)
    async def fast(ctx: JobContext) -> None: ...

    @app.job(every=3600)
    async def hourly(ctx: JobContext) -> None: ...

    def next_slot(job: str) -> float:
        sample = f'frameworkm_tick_next_slot_timestamp_seconds{{schedule="{job}"}}'
        return value(metrics.exposition().decode(), sample)

    ticker = Ticker(app.jobs.values(), memory, grace=2, observer=metrics)
    task = asyncio.create_task(ticker.run())
    try:
        shown = 'seconds{schedule="fast"}'
        await wait_until(lambda: shown in metrics.exposition().decode(), timeout=10)
        first = next_slot("fast")
        assert time.time() < first <= time.time() + 1
        assert next_slot("hourly") == (int(time.time()) // 3600 + 1) * 3600
        await wait_until(lambda: next_slot("fast") > first, timeout=10)  # it moved on
        assert next_slot("fast") > time.time() - 1  # never left in the past
    finally:
        ticker.stop()
        await task


def test_a_schedule_no_longer_ticked_leaves_the_next_slot_gauge() -> None:
    metrics = Metrics(concurrency=1)
    metrics.next_slot("@tenant-1", 1_700_000_000)
    assert "@tenant-1" in metrics.exposition().decode()
    metrics.next_slot("@tenant-1", None)
    assert "@tenant-1" not in metrics.exposition().decode()


async def test_queue_depth_is_sampled_from_the_broker_at_each_scrape(
    memory: MemoryBroker,
) -> None:
    metrics = Metrics(concurrency=1, broker=memory)
    for i in range(3):
        await memory.enqueue("job", i=i)
    queue = f'queue="{memory.display_url}"'
    text = (await metrics.scrape()).decode()
    assert value(text, f'frameworkm_queue_messages{{{queue},state="ready"}}') == 3
    assert value(text, f'frameworkm_queue_messages{{{queue},state="dead"}}') == 0
    [delivery, *_] = await memory.receive(1, 1)
    await memory.dead_letter(delivery, "poison")
    metrics._sampled_at -= 10  # the next scrape samples again, not the reused one
    text = (await metrics.scrape()).decode()
    assert value(text, f'frameworkm_queue_messages{{{queue},state="ready"}}') == 2
    assert value(text, f'frameworkm_queue_messages{{{queue},state="dead"}}') == 1
    assert value(text, f"frameworkm_queue_consumers{{{queue}}}") == 1
    await memory.close()  # the broker cannot answer: no depth rather than a stale one
    metrics._sampled_at -= 10
    text = (await metrics.scrape()).decode()
    assert "frameworkm_queue_messages{" not in text
    assert value(text, 'frameworkm_broker_errors_total{operation="stats"}') == 1


async def test_a_lost_broker_is_counted_and_its_return_is_a_reconnect(
    memory: MemoryBroker,
) -> None:
    app, metrics = App(), Metrics(concurrency=1, broker=memory)

    @app.job
    async def ok(ctx: JobContext) -> None: ...

    async with running_worker(app, memory, observer=metrics) as worker:
        await memory.enqueue("ok")
        await wait_until(lambda: worker.stats.succeeded == 1)
        assert metrics.connected == 1
        await memory.close()  # every receive now fails
        await wait_until(lambda: metrics.broker_errors["receive"] >= 2)
        assert value(metrics.exposition().decode(), "frameworkm_broker_connected") == 0
        await memory.connect()
        await memory.enqueue("ok")
        await wait_until(lambda: worker.stats.succeeded == 2)
    text = metrics.exposition().decode()
    assert value(text, "frameworkm_broker_connected") == 1
    assert value(text, "frameworkm_broker_reconnects_total") == 1
    assert value(text, 'frameworkm_broker_errors_total{operation="receive"}') >= 2


@pytest.mark.anyio
async def test_metrics_without_prometheus_client_say_which_package_to_install() -> None:
    from framework_m_core.observability.probes import ProbeServer
    from framework_m_core.testing.proxy import free_port

    def ok() -> tuple[bool, str]:
        return True, "ok"

    server = ProbeServer("127.0.0.1", free_port(), ok, ok, None)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = await reader.read()
        writer.close()
    finally:
        await server.close()
    assert answer.startswith(b"HTTP/1.1 404")
    assert answer.endswith(b"no metrics: pip install prometheus-client")
    assert b"framework-m-core[" not in answer  # the index's framework-m-core is another's


async def test_triggered_runs_are_counted_once_each_whatever_their_attempts(
    memory: MemoryBroker,
) -> None:
    app, metrics = App(backoff=0.01), Metrics(concurrency=1)
    attempts: list[int] = []

    @app.job(every=3600, max_attempts=2)
    async def report(ctx: JobContext) -> None:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")

    await steering.trigger(memory, "report")
    await memory.enqueue("report")  # not a trigger
    async with running_worker(app, memory, observer=metrics) as worker:
        await wait_until(lambda: worker.stats.succeeded == 2)
    text = metrics.exposition().decode()
    assert sorted(attempts) == [1, 1, 2, 2]
    assert value(text, 'frameworkm_jobs_triggered_total{job_name="report"}') == 1
    assert value(text, 'frameworkm_jobs_started_total{job_name="report"}') == 4


def test_runtime_schedules_beyond_the_first_hundred_share_one_label() -> None:
    metrics = Metrics(concurrency=1)
    for i in range(150):
        metrics.tick(f"@tenant-{i}", "enqueued", 1_800_000_000 + i)
    metrics.tick("@tenant-3", "duplicate", 1_800_000_000)
    metrics.tick("report", "enqueued", 1_800_000_000)  # code schedules keep theirs
    text = metrics.exposition().decode()
    assert value(text, 'frameworkm_ticks_total{outcome="enqueued",schedule="@tenant-99"}') == 1
    assert value(text, 'frameworkm_ticks_total{outcome="duplicate",schedule="@tenant-3"}') == 1
    assert value(text, 'frameworkm_ticks_total{outcome="enqueued",schedule="@other"}') == 50
    assert value(text, 'frameworkm_ticks_total{outcome="enqueued",schedule="report"}') == 1
    assert "@tenant-100" not in text

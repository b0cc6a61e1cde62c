"""Prometheus metrics of a worker (the ``metrics`` extra: ``pip install prometheus-client``).

Names follow Prometheus conventions and pass ``promtool check metrics``
(``frameworkm_`` prefix, ``_total`` counters, ``_seconds`` in base units); labels are
schedules, job names and outcomes, never ids, and never a label Prometheus sets on
every target (``job``, ``instance``), which a scrape would rename to ``exported_job``.

The hot path only adds to plain numbers (the event loop is one thread): the
metric families are built from them when ``/metrics`` is scraped, so a worker
with metrics on drains its queue about as fast as one without. The queue's depth
comes from the broker's own numbers (``queue_stats()``), sampled at the scrape.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

from ..ports.capabilities import Capability
from ..ports.protocols import BrokerProtocol
from ..ports.records import QueueStats
from .observer import BrokerOperation, JobOutcome, Observer, TickOutcome

try:
    import prometheus_client as prom
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )
except ImportError:  # the extra is not installed
    prom = None  # type: ignore[assignment]

log = logging.getLogger("framework_m.metrics")

_SAMPLE_TIMEOUT = 2.0  # a scrape waits at most this long for the broker's numbers
_SAMPLE_REUSE = 1.0  # scrapes closer together than this share one sample
# Runtime schedules with a label of their own per replica; the rest are counted as @other.
_RUNTIME_LABELS = 100
_OTHER_RUNTIME = "@other"
_BOUNDS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)


def available() -> bool:
    return prom is not None


class _Histogram:
    """Bucket counts (not cumulative), sum and count of one job's observations."""

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(_BOUNDS) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(_BOUNDS, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        out, running = [], 0
        for bound, count in zip((*map(str, _BOUNDS), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, float(running)))
        return out


class Metrics(Observer):
    """What this replica's ticker and worker did, exposed in the Prometheus format."""

    def __init__(
        self,
        concurrency: int,
        broker: BrokerProtocol | None = None,
        *,
        schedules: int = 0,
        ticker: bool = False,
    ) -> None:
        """``schedules``: how many the app has; ``ticker``: whether this replica ticks."""
        if prom is None:
            raise RuntimeError("prometheus-client is not installed: pip install prometheus-client")
        self.concurrency = concurrency
        self.schedules = schedules
        self.ticker = ticker
        self.broker = broker
        self.connected = 0
        self.reconnects = 0
        self.broker_errors: defaultdict[str, int] = defaultdict(int)
        self.queue: QueueStats | None = None  # the last sample, None when it failed
        self._sampled_at = -_SAMPLE_REUSE
        self.running_jobs = 0
        self.waiting_jobs: defaultdict[str, int] = defaultdict(int)
        self.rate_waiting_jobs: defaultdict[str, int] = defaultdict(int)
        self.ticks: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.last_slot: dict[str, int] = {}
        self.next_slots: dict[str, int] = {}
        self._runtime_labels: set[str] = set()
        self.jobs: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.started: defaultdict[str, int] = defaultdict(int)
        self.triggered: defaultdict[str, int] = defaultdict(int)
        self.duration: defaultdict[str, _Histogram] = defaultdict(_Histogram)
        self.delay: defaultdict[str, _Histogram] = defaultdict(_Histogram)
        self.lag: defaultdict[str, _Histogram] = defaultdict(_Histogram)
        self.loop_lag_seconds = 0.0  # the latest
        self.loop_stalls = 0
        self.outbox: tuple[int, float | None, int] | None = None  # rows, oldest, failing
        self.outbox_relays = 0
        self.outbox_failures = 0
        self.registry = prom.CollectorRegistry()
        self.registry.register(_Collector(self))

    def exposition(self) -> bytes:
        return bytes(prom.generate_latest(self.registry))

    async def scrape(self) -> bytes:
        """The exposition, with the queue's numbers sampled from the broker now."""
        await self._sample()
        return self.exposition()

    async def _sample(self) -> None:
        broker = self.broker
        if broker is None or Capability.QUEUE_STATS not in broker.capabilities:
            return
        if time.monotonic() - self._sampled_at < _SAMPLE_REUSE:
            return
        self._sampled_at = time.monotonic()
        try:
            async with asyncio.timeout(_SAMPLE_TIMEOUT):
                self.queue = await broker.queue_stats()
        except Exception as exc:  # a scrape shows no depth rather than a stale one
            self.queue = None
            self.broker_errors["stats"] += 1
            log.debug("queue stats of %s not sampled: %s", broker.display_url, exc)

    def outbox_seen(self, rows: int, oldest: float | None, failing: int) -> None:
        self.outbox = (rows, oldest, failing)

    def outbox_relayed(self, count: int) -> None:
        self.outbox_relays += count

    def outbox_failed(self, count: int) -> None:
        self.outbox_failures += count

    def broker_connected(self, up: bool) -> None:
        if up and not self.connected and self.broker_errors["receive"]:
            self.reconnects += 1
        self.connected = int(up)

    def broker_error(self, operation: BrokerOperation) -> None:
        self.broker_errors[operation] += 1

    def loop_lag(self, seconds: float) -> None:
        self.loop_lag_seconds = seconds

    def loop_stalled(self) -> None:
        self.loop_stalls += 1

    def tick(self, job: str, outcome: TickOutcome, slot: int, count: int = 1) -> None:
        job = self._label(job)
        self.ticks[job, outcome] += count
        if outcome in ("enqueued", "caught_up", "duplicate") and slot > self.last_slot.get(job, 0):
            self.last_slot[job] = slot

    def next_slot(self, job: str, slot: int | None) -> None:
        label = self._label(job)
        if label == _OTHER_RUNTIME:  # many schedules: no one next slot to show
            return
        if slot is None:
            self.next_slots.pop(label, None)
        else:
            self.next_slots[label] = slot

    def _label(self, schedule: str) -> str:
        """A schedule's label: runtime schedules (``@{id}``) keep their own for the
        first 100 seen here, the others share ``@other``."""
        if not schedule.startswith("@") or schedule in self._runtime_labels:
            return schedule
        if len(self._runtime_labels) >= _RUNTIME_LABELS:
            return _OTHER_RUNTIME
        self._runtime_labels.add(schedule)
        return schedule

    def job_started(self, job: str, enqueued_at: float, scheduled_at: int | None) -> None:
        now = time.time()
        self.started[job] += 1
        self.delay[job].observe(max(0.0, now - enqueued_at))
        if scheduled_at is not None:
            self.lag[job].observe(max(0.0, now - scheduled_at))

    def job_triggered(self, job: str) -> None:
        self.triggered[job] += 1

    def job_finished(self, job: str, outcome: JobOutcome, duration: float | None) -> None:
        self.jobs[job, outcome] += 1
        if duration is not None:
            self.duration[job].observe(duration)

    def running(self, delta: int) -> None:
        self.running_jobs += delta

    def waiting(self, job: str, delta: int) -> None:
        self.waiting_jobs[job] += delta

    def rate_waiting(self, job: str, delta: int) -> None:
        self.rate_waiting_jobs[job] += delta


class _Collector:
    """Builds the metric families from a :class:`Metrics` at scrape time."""

    def __init__(self, metrics: Metrics) -> None:
        self.m = metrics

    def collect(self) -> Iterator[Any]:
        m = self.m
        ticks = CounterMetricFamily(
            "frameworkm_ticks",
            "Slots by what became of them on this replica: enqueued (first), caught_up "
            "(a missed slot enqueued late), duplicate (already enqueued), skipped, failed, "
            "unknown (no answer in time: maybe stored), clock_held, paused",
            labels=["schedule", "outcome"],
        )
        for (job, outcome), value in sorted(m.ticks.items()):
            ticks.add_metric([job, outcome], value)
        yield ticks
        yield _gauge(
            "frameworkm_tick_last_slot_timestamp_seconds",
            "The latest slot known enqueued (by any replica), as a unix time",
            "schedule",
            m.last_slot,
        )
        yield _gauge(
            "frameworkm_tick_next_slot_timestamp_seconds",
            "The next slot this replica's ticker waits for, as a unix time: one past the "
            "present by more than a tick means no ticker moved on",
            "schedule",
            m.next_slots,
        )
        jobs = CounterMetricFamily(
            "frameworkm_jobs",
            "Deliveries settled, by outcome (skipped: the schedule's previous run was "
            "still running, overlap='skip'; cancelled: by request, before or while it ran)",
            labels=["job_name", "outcome"],
        )
        for (job, outcome), value in sorted(m.jobs.items()):
            jobs.add_metric([job, outcome], value)
        yield jobs
        started = CounterMetricFamily(
            "frameworkm_jobs_started", "Handlers started", labels=["job_name"]
        )
        for job, value in sorted(m.started.items()):
            started.add_metric([job], value)
        yield started
        triggered = CounterMetricFamily(
            "frameworkm_jobs_triggered",
            "Runs an operator triggered (m schedules trigger), at their first attempt",
            labels=["job_name"],
        )
        for job, value in sorted(m.triggered.items()):
            triggered.add_metric([job], value)
        yield triggered
        for name, doc, table in (
            ("frameworkm_job_duration_seconds", "Handler run time", m.duration),
            ("frameworkm_job_start_delay_seconds", "From enqueue to the handler's start", m.delay),
            ("frameworkm_job_slot_lag_seconds", "From a ticked job's slot to its start", m.lag),
        ):
            family = HistogramMetricFamily(name, doc, labels=["job_name"])
            for job, hist in sorted(table.items()):
                family.add_metric([job], hist.buckets(), hist.total)
            yield family
        yield GaugeMetricFamily("frameworkm_jobs_running", "Handlers running", m.running_jobs)
        yield from _waiting_families(m)
        yield GaugeMetricFamily("frameworkm_concurrency", "Handlers allowed at once", m.concurrency)
        yield GaugeMetricFamily(
            "frameworkm_schedules",
            "Schedules in this replica's app (runtime ones not counted)",
            m.schedules,
        )
        yield GaugeMetricFamily(
            "frameworkm_ticker_enabled", "1 when this replica runs a ticker", int(m.ticker)
        )
        yield GaugeMetricFamily(
            "frameworkm_event_loop_lag_seconds",
            "How much later than asked the worker's event loop last woke",
            m.loop_lag_seconds,
        )
        yield CounterMetricFamily(
            "frameworkm_event_loop_stalls",
            "Times the event loop stayed blocked longer than --stall-warning (a handler "
            "blocking it)",
            m.loop_stalls,
        )
        yield from _broker_families(m)
        yield from _outbox_families(m)


def _waiting_families(m: Metrics) -> Iterator[Any]:
    """Runs waiting, and of them those waiting for a start under a rate."""
    yield _gauge(
        "frameworkm_jobs_waiting",
        "Runs waiting for a concurrency limit's place, a start under a rate, their"
        " schedule's running run or their own run in this process",
        "job_name",
        m.waiting_jobs,
    )
    yield _gauge(
        "frameworkm_jobs_rate_waiting",
        "Runs waiting for a start under their job's rate_limit (counted in"
        " frameworkm_jobs_waiting too)",
        "job_name",
        m.rate_waiting_jobs,
    )


def _gauge(name: str, doc: str, label: str, values: Mapping[str, float]) -> Any:
    """A gauge with one sample per entry of ``values``, labelled ``label``."""
    family = GaugeMetricFamily(name, doc, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], value)
    return family


def _outbox_families(m: Metrics) -> Iterator[Any]:
    """The outbox relay's numbers, once it counted its table (none without a relay)."""
    if m.outbox is None:
        return
    rows, oldest, failing = m.outbox
    yield GaugeMetricFamily(
        "frameworkm_outbox_rows", "Rows waiting in the outbox table at the relay's last count", rows
    )
    yield GaugeMetricFamily(
        "frameworkm_outbox_oldest_age_seconds",
        "Age of the oldest row waiting in the outbox table (0 when none waits)",
        oldest or 0.0,
    )
    yield GaugeMetricFamily(
        "frameworkm_outbox_failing_rows",
        "Rows waiting in the outbox table whose publish failed at least once",
        failing,
    )
    yield CounterMetricFamily(
        "frameworkm_outbox_relayed",
        "Outbox rows this replica published and deleted",
        m.outbox_relays,
    )
    yield CounterMetricFamily(
        "frameworkm_outbox_publish_failures",
        "Outbox rows whose publish failed on this replica (tried again with backoff)",
        m.outbox_failures,
    )


def _broker_families(m: Metrics) -> Iterator[Any]:
    yield GaugeMetricFamily(
        "frameworkm_broker_connected", "1 while the broker answers this worker", m.connected
    )
    yield CounterMetricFamily(
        "frameworkm_broker_reconnects",
        "Times the broker answered again after failing",
        m.reconnects,
    )
    errors = CounterMetricFamily(
        "frameworkm_broker_errors",
        "Failed broker calls (publish, receive, settle, stats), retried or not",
        labels=["operation"],
    )
    for operation, value in sorted(m.broker_errors.items()):
        errors.add_metric([operation], value)
    yield errors
    if m.queue is None or m.broker is None:
        return
    queue = m.broker.display_url
    messages = GaugeMetricFamily(
        "frameworkm_queue_messages",
        "Messages in the queue by state (ready, reserved, scheduled, dead), "
        "by the broker's own numbers at the scrape",
        labels=["queue", "state"],
    )
    for state, count in (
        ("ready", m.queue.ready),
        ("reserved", m.queue.reserved),
        ("scheduled", m.queue.scheduled),
        ("dead", m.queue.dead_letters),
    ):
        if count is not None:
            messages.add_metric([queue, state], count)
    yield messages
    if m.queue.consumers is not None:
        consumers = GaugeMetricFamily(
            "frameworkm_queue_consumers",
            "Consumers the broker knows attached to the queue",
            labels=["queue"],
        )
        consumers.add_metric([queue], m.queue.consumers)
        yield consumers

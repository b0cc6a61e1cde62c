"""Prometheus metrics of a worker (``pip install framework-m-core[metrics]``).

Names follow Prometheus conventions (``framework_m_`` prefix, ``_total`` counters,
``_seconds`` in base units); labels are job names and outcomes, never ids.

The hot path only adds to plain numbers (the event loop is one thread): the
metric families are built from them when ``/metrics`` is scraped, so a worker
with metrics on drains its queue about as fast as one without.
"""

from __future__ import annotations

import bisect
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from .observe import JobOutcome, Observer, TickOutcome

try:
    import prometheus_client as prom
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )
except ImportError:  # the extra is not installed
    prom = None  # type: ignore[assignment]

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

    def __init__(self, concurrency: int) -> None:
        if prom is None:
            raise RuntimeError("prometheus-client is not installed: framework-m-core[metrics]")
        self.concurrency = concurrency
        self.running_jobs = 0
        self.ticks: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.last_slot: dict[str, int] = {}
        self.jobs: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.started: defaultdict[str, int] = defaultdict(int)
        self.duration: defaultdict[str, _Histogram] = defaultdict(_Histogram)
        self.delay: defaultdict[str, _Histogram] = defaultdict(_Histogram)
        self.lag: defaultdict[str, _Histogram] = defaultdict(_Histogram)
        self.registry = prom.CollectorRegistry()
        self.registry.register(_Collector(self))

    def exposition(self) -> bytes:
        return bytes(prom.generate_latest(self.registry))

    def tick(self, job: str, outcome: TickOutcome, slot: int, count: int = 1) -> None:
        self.ticks[job, outcome] += count
        if outcome in ("enqueued", "duplicate") and slot > self.last_slot.get(job, 0):
            self.last_slot[job] = slot

    def job_started(self, job: str, enqueued_at: float, scheduled_at: int | None) -> None:
        now = time.time()
        self.started[job] += 1
        self.delay[job].observe(max(0.0, now - enqueued_at))
        if scheduled_at is not None:
            self.lag[job].observe(max(0.0, now - scheduled_at))

    def job_finished(self, job: str, outcome: JobOutcome, duration: float | None) -> None:
        self.jobs[job, outcome] += 1
        if duration is not None:
            self.duration[job].observe(duration)

    def running(self, delta: int) -> None:
        self.running_jobs += delta


class _Collector:
    """Builds the metric families from a :class:`Metrics` at scrape time."""

    def __init__(self, metrics: Metrics) -> None:
        self.m = metrics

    def collect(self) -> Iterator[Any]:
        m = self.m
        ticks = CounterMetricFamily(
            "framework_m_ticks",
            "Slots by what became of them on this replica: enqueued (first), duplicate "
            "(already enqueued), late, failed, clock_held",
            labels=["job", "outcome"],
        )
        for (job, outcome), value in sorted(m.ticks.items()):
            ticks.add_metric([job, outcome], value)
        yield ticks
        last = GaugeMetricFamily(
            "framework_m_tick_last_slot_timestamp_seconds",
            "The latest slot known enqueued (by any replica), as a unix time",
            labels=["job"],
        )
        for job, slot in sorted(m.last_slot.items()):
            last.add_metric([job], slot)
        yield last
        jobs = CounterMetricFamily(
            "framework_m_jobs", "Deliveries settled, by outcome", labels=["job", "outcome"]
        )
        for (job, outcome), value in sorted(m.jobs.items()):
            jobs.add_metric([job, outcome], value)
        yield jobs
        started = CounterMetricFamily(
            "framework_m_jobs_started", "Handlers started", labels=["job"]
        )
        for job, value in sorted(m.started.items()):
            started.add_metric([job], value)
        yield started
        for name, doc, table in (
            ("framework_m_job_duration_seconds", "Handler run time", m.duration),
            ("framework_m_job_start_delay_seconds", "From enqueue to the handler's start", m.delay),
            ("framework_m_job_slot_lag_seconds", "From a ticked job's slot to its start", m.lag),
        ):
            family = HistogramMetricFamily(name, doc, labels=["job"])
            for job, hist in sorted(table.items()):
                family.add_metric([job], hist.buckets(), hist.total)
            yield family
        yield GaugeMetricFamily("framework_m_jobs_running", "Handlers running", m.running_jobs)
        yield GaugeMetricFamily(
            "framework_m_concurrency", "Handlers allowed at once", m.concurrency
        )

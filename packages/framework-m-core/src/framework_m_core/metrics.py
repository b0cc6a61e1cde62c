"""Prometheus metrics of a worker (``pip install framework-m-core[metrics]``).

Names follow Prometheus conventions (``framework_m_`` prefix, ``_total`` counters,
``_seconds`` in base units); labels are job names and outcomes, never ids.
"""

from __future__ import annotations

import time

from .observe import JobOutcome, Observer, TickOutcome

try:
    import prometheus_client as prom
except ImportError:  # the extra is not installed
    prom = None  # type: ignore[assignment]

_LATENCY = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800)


def available() -> bool:
    return prom is not None


class Metrics(Observer):
    """Counters, gauges and histograms in a registry of their own."""

    def __init__(self, concurrency: int) -> None:
        if prom is None:
            raise RuntimeError("prometheus-client is not installed: framework-m-core[metrics]")
        self.registry = prom.CollectorRegistry()
        r = self.registry
        self._ticks = prom.Counter(
            "framework_m_ticks", "Slots by what became of them on this replica: enqueued "
            "(first), duplicate (already enqueued), late, failed, clock_held",
            ["job", "outcome"], registry=r,
        )  # fmt: skip
        self._last_slot = prom.Gauge(
            "framework_m_tick_last_slot_timestamp_seconds",
            "The latest slot known enqueued (by any replica), as a unix time",
            ["job"], registry=r,
        )  # fmt: skip
        self._jobs = prom.Counter(
            "framework_m_jobs", "Deliveries by outcome", ["job", "outcome"], registry=r
        )
        self._started = prom.Counter(
            "framework_m_jobs_started", "Handlers started", ["job"], registry=r
        )
        self._slots: dict[str, int] = {}
        self._duration = prom.Histogram(
            "framework_m_job_duration_seconds", "Handler run time", ["job"],
            buckets=_LATENCY, registry=r,
        )  # fmt: skip
        self._delay = prom.Histogram(
            "framework_m_job_start_delay_seconds", "From enqueue to the handler's start",
            ["job"], buckets=_LATENCY, registry=r,
        )  # fmt: skip
        self._lag = prom.Histogram(
            "framework_m_job_slot_lag_seconds", "From a ticked job's slot to its start",
            ["job"], buckets=_LATENCY, registry=r,
        )  # fmt: skip
        self._running = prom.Gauge("framework_m_jobs_running", "Handlers running", registry=r)
        limit = prom.Gauge("framework_m_concurrency", "Handlers allowed at once", registry=r)
        limit.set(concurrency)

    def exposition(self) -> bytes:
        return bytes(prom.generate_latest(self.registry))

    def tick(self, job: str, outcome: TickOutcome, slot: int, count: int = 1) -> None:
        self._ticks.labels(job, outcome).inc(count)
        if outcome in ("enqueued", "duplicate") and slot > self._slots.get(job, 0):
            self._slots[job] = slot
            self._last_slot.labels(job).set(slot)

    def job_started(self, job: str, enqueued_at: float, scheduled_at: int | None) -> None:
        now = time.time()
        self._started.labels(job).inc()
        self._delay.labels(job).observe(max(0.0, now - enqueued_at))
        if scheduled_at is not None:
            self._lag.labels(job).observe(max(0.0, now - scheduled_at))

    def job_finished(self, job: str, outcome: JobOutcome, duration: float | None) -> None:
        self._jobs.labels(job, outcome).inc()
        if duration is not None:
            self._duration.labels(job).observe(duration)

    def running(self, delta: int) -> None:
        self._running.inc(delta)

"""Testing your own jobs: run one handler, drain a queue, drive the ticker through time.

None of these needs a broker server or pytest: they run on ``memory://``.

* :func:`run_job` calls one job's handler once, as a worker would (a full
  :class:`~framework_m_core.JobContext`, ``app.state``, a thread for a plain ``def``).
* :func:`drain` runs a worker on a memory:// broker until its queue is idle and
  reports which jobs succeeded, were retried and were dead-lettered (and why).
* :func:`ticks_between` runs the ticker on a virtual clock from one instant to
  another in a moment and returns the slots it enqueued.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ..adapters.memory import MemoryBroker, MemorySettings
from ..app import App
from ..errors import ConfigurationError, MessageDecodeError
from ..jobs import JobContext
from ..observability.logs import job_logger
from ..observability.observer import JobOutcome, Observer, TickOutcome
from ..ports.messages import JobMessage, decode_message, new_job_id, tick_deduplication_id
from ..ports.protocols import BrokerProtocol, JobQueueProtocol
from ..ports.records import Delivery
from ..runtime.worker import Worker
from ..scheduling.ticker import Ticker

_job_log = logging.getLogger("framework_m.job")


async def run_job(
    app: App,
    job_name: str,
    /,
    *,
    attempt: int = 1,
    scheduled_at: datetime | None = None,
    broker: JobQueueProtocol | None = None,
    **kwargs: Any,
) -> Any:
    """Run ``job_name``'s handler once with ``kwargs`` and return what it returns.

    The context is a worker's: a fresh job id, ``attempt``, the job's
    ``max_attempts``, ``scheduled_at`` (a ticked job's slot), ``app.state`` (run
    ``await app.startup()`` first for what the hooks set up) and ``broker`` for
    follow-up jobs (default: a memory:// broker of its own, connected for the call).
    A plain ``def`` handler runs in a thread. Exceptions propagate as raised; the
    job's timeout and retries are the worker's business, not applied here.
    """
    spec = app.jobs.get(job_name)
    if spec is None:
        known = ", ".join(sorted(app.jobs)) or "none"
        raise ConfigurationError(f"unknown job {job_name!r} (registered: {known})")
    if broker is None:
        async with MemoryBroker(MemorySettings(f"run-job-{uuid.uuid4().hex}")) as own:
            await own.sync_schema()
            return await run_job(
                app, job_name, attempt=attempt, scheduled_at=scheduled_at, broker=own, **kwargs
            )
    job_id = new_job_id()
    slot = None if scheduled_at is None else int(scheduled_at.timestamp())
    ctx = JobContext(
        job_id=job_id,
        job_name=job_name,
        attempt=attempt,
        max_attempts=spec.max_attempts,
        scheduled_at=scheduled_at,
        enqueued_at=datetime.now(UTC),
        deduplication_id=None,
        broker=broker,
        log=job_logger(_job_log, job_name, job_id, attempt, slot),
        state=app.state,
    )
    if spec.blocking:
        call = functools.partial(spec.handler, ctx, **kwargs)
        return await asyncio.to_thread(contextvars.copy_context().run, call)
    return await spec.handler(ctx, **kwargs)


@dataclasses.dataclass
class Drained:
    """What :func:`drain` saw settled, in order."""

    succeeded: list[JobMessage] = dataclasses.field(default_factory=list)
    retried: list[JobMessage] = dataclasses.field(default_factory=list)
    #: (the message, or None when it was not a job at all; the reason).
    dead_lettered: list[tuple[JobMessage | None, str]] = dataclasses.field(default_factory=list)
    #: Ticks stored after their slot's grace: expired, acked without running.
    expired: list[JobMessage] = dataclasses.field(default_factory=list)
    #: Slots that came while their schedule's previous run was running (overlap="skip",
    #: or a second waiting run under "buffer_one"): acked without running.
    skipped: list[JobMessage] = dataclasses.field(default_factory=list)

    def names(self, outcome: str) -> list[str]:
        """The job names of one outcome (``succeeded``, ``retried``, ``dead_lettered``,
        ``expired``, ``skipped``)."""
        if outcome == "dead_lettered":
            return [m.job_name if m else "-" for m, _ in self.dead_lettered]
        messages: list[JobMessage] = getattr(self, outcome)
        return [m.job_name for m in messages]


class _Recording(MemoryBroker):
    """A memory:// broker that notes every settle, and retries without waiting."""

    def __init__(self, settings: MemorySettings, into: Drained, skip_delays: bool) -> None:
        super().__init__(settings)
        self._into, self._skip_delays = into, skip_delays

    async def ack(self, delivery: Delivery) -> None:
        await super().ack(delivery)
        if (message := _decoded(delivery)) is not None:
            late = message.not_after is not None and (delivery.stored_at or 0) > message.not_after
            (self._into.expired if late else self._into.succeeded).append(message)

    async def retry(self, delivery: Delivery, delay: float) -> None:
        await super().retry(delivery, 0.0 if self._skip_delays else delay)
        if (message := _decoded(delivery)) is not None:
            self._into.retried.append(message)

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        await super().dead_letter(delivery, reason)
        self._into.dead_lettered.append((_decoded(delivery), reason))


class _Skips(Observer):
    """Moves a skipped slot from ``succeeded`` to ``skipped``: the worker reports the skip
    right after its ack, before anything else runs."""

    def __init__(self, into: Drained) -> None:
        self._into = into

    def job_finished(self, job: str, outcome: JobOutcome, duration: float | None) -> None:
        if outcome != "skipped":
            return
        acked = self._into.succeeded
        for i in range(len(acked) - 1, -1, -1):
            if acked[i].job_name == job:
                self._into.skipped.append(acked.pop(i))
                return


def _decoded(delivery: Delivery) -> JobMessage | None:
    try:
        return decode_message(delivery.body)
    except MessageDecodeError:
        return None


async def drain(
    app: App,
    broker: MemoryBroker,
    *,
    timeout: float = 30.0,
    skip_delays: bool = True,
    concurrency: int = 10,
) -> Drained:
    """Run ``app``'s jobs from ``broker``'s memory:// queue until it is idle: nothing
    ready, held or waiting to be retried, and no handler running. Jobs those jobs
    enqueue run too. With ``skip_delays`` a retry is due at once, not after its
    backoff. Startup and shutdown hooks run around it. Raises TimeoutError when the
    queue is not idle after ``timeout`` seconds (a job that keeps enqueuing more).
    """
    report = Drained()
    worker_side = _Recording(broker.settings, report, skip_delays)
    async with worker_side:
        await worker_side.sync_schema()
        worker = Worker(
            app,
            worker_side,
            concurrency=concurrency,
            fetch_timeout=0.05,
            observer=_Skips(report),
        )
        task = asyncio.create_task(worker.run())
        try:
            deadline = time.monotonic() + timeout
            while not task.done() and not await _idle(worker_side):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the queue was not idle after {timeout:g}s")
                await asyncio.sleep(0.005)
        finally:
            worker.stop()
            await task
    return report


async def _idle(broker: BrokerProtocol) -> bool:
    stats = await broker.queue_stats()
    return (stats.ready, stats.reserved, stats.scheduled) == (0, 0, 0)


@dataclasses.dataclass(frozen=True)
class Tick:
    """A slot the ticker enqueued."""

    job_name: str
    slot: datetime  # aware, UTC
    deduplication_id: str


class _VirtualTicker(Ticker):
    """A ticker whose clock jumps to each wake-up instead of sleeping."""

    def __init__(self, app: App, broker: MemoryBroker, start: float, end: float) -> None:
        self.now, self.end = start, end
        super().__init__(app.jobs.values(), broker, grace=30, clock=lambda: self.now)

    async def _sleep_until(self, wake_at: float) -> None:
        await asyncio.sleep(0)
        if self._publishing:  # the publishes started at this instant end at it
            await asyncio.wait(set(self._publishing))
        if wake_at > self.end:
            self.stop()
            return
        self.now = max(self.now, wake_at)


async def ticks_between(
    app: App,
    start: datetime,
    end: datetime,
    *,
    broker: MemoryBroker | None = None,
) -> list[Tick]:
    """The slots a replica started at ``start`` enqueues until ``end``, in order.

    The ticker runs on a virtual clock (a year of schedules takes a moment), with
    the schedules' real rules: time zones, DST days, the grace on start (the latest
    slot inside grace is fired at once); slots at ``start`` and at ``end`` count. The
    ticks go to ``broker`` (memory://, e.g. to :func:`drain` them afterwards: they are
    stored at their virtual time, so none is dropped as late) or to a queue of their own.
    """
    if start.tzinfo is None or end.tzinfo is None:
        raise ConfigurationError("ticks_between needs aware datetimes (e.g. tzinfo=UTC)")
    own = broker is None
    target = broker or MemoryBroker(
        MemorySettings(f"ticks-{uuid.uuid4().hex}", dedup_window=10 * 365 * 86_400)
    )
    if own:
        await target.connect()
        await target.sync_schema()
    ticker = _VirtualTicker(app, target, start.timestamp(), end.timestamp())
    ticks: list[Tick] = []
    ticker.observer = _Enqueued(ticks)
    clock = target.clock
    target.clock = lambda: ticker.now  # the clock check compares against the broker's
    try:
        await ticker.run()
    finally:
        target.clock = clock
        if own:
            await target.close()
    return ticks


class _Enqueued(Observer):
    def __init__(self, into: list[Tick]) -> None:
        self.into = into

    def tick(self, job: str, outcome: TickOutcome, slot: int, count: int = 1) -> None:
        if outcome == "enqueued":
            at = datetime.fromtimestamp(slot, UTC)
            self.into.append(Tick(job, at, tick_deduplication_id(job, slot)))


__all__: Sequence[str] = ["Drained", "Tick", "drain", "run_job", "ticks_between"]

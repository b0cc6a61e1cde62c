"""The worker's side of schedule histories (:mod:`~framework_m_core.control.history`):
each settled delivery of a ticked or triggered job is added to its schedule's history,
in a task of its own after the settle, so no run waits for it. Other jobs cost one
``None`` check."""

from __future__ import annotations

import asyncio
import logging
import time

from ..control.history import Outcome, ScheduleRun, record_run
from ..ports.capabilities import Capability
from ..ports.messages import JobMessage, schedule_of
from ..ports.protocols import BrokerProtocol
from ..ports.records import Delivery
from .events import reraise_if_cancelled

log = logging.getLogger("framework_m.worker")

_QUIET = 60.0  # seconds between two warnings of histories not written


class RunHistory:
    """Adds the settled runs of one worker's ticked jobs to their schedules' histories."""

    def __init__(self, broker: BrokerProtocol, replica: str) -> None:
        self.broker = broker
        self.replica = replica
        self.on = Capability.STORE in broker.capabilities
        self._writing: set[asyncio.Task[None]] = set()
        self._warned_at = -_QUIET

    def ended(
        self,
        message: JobMessage,
        delivery: Delivery,
        outcome: Outcome,
        started_at: float | None = None,
        error: str | None = None,
    ) -> None:
        """``delivery`` of ``message`` was settled as ``outcome``; kept when it is a run
        of a schedule."""
        schedule = schedule_of(message.deduplication_id) if self.on else None
        if schedule is None:
            return
        run = ScheduleRun(
            slot=message.scheduled_at,
            job_id=message.id,
            replica=self.replica,
            attempt=delivery.attempt,
            outcome=outcome,
            started_at=started_at,
            finished_at=time.time(),
            error=error,
        )
        task = asyncio.get_running_loop().create_task(self._write(schedule, run))
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)

    async def _write(self, schedule: str, run: ScheduleRun) -> None:
        try:
            if not await record_run(self.broker, schedule, run):
                self._warn(schedule, "other writers won every round")
        except Exception as exc:
            reraise_if_cancelled()
            self._warn(schedule, str(exc) or type(exc).__name__)

    def _warn(self, schedule: str, why: str) -> None:
        now = time.monotonic()
        level = logging.WARNING if now - self._warned_at >= _QUIET else logging.DEBUG
        if level == logging.WARNING:
            self._warned_at = now
        log.log(level, "schedule %s: a run not added to its history (%s)", schedule, why)

    async def settled(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the histories being written (the worker
        stops)."""
        if self._writing:
            await asyncio.wait(set(self._writing), timeout=timeout)

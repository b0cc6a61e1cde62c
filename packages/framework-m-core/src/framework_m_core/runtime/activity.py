"""The worker's side of :mod:`~framework_m_core.control.activity` and
:mod:`~framework_m_core.control.history`: its runs going on, its latest settled
deliveries, and each settled run of a schedule, written at most once a
:data:`~framework_m_core.control.activity.FLUSH` while something changed, in a task of
their own. On a job's path they cost a dict operation at its start and end and a tuple
appended when it is settled; the records are built only when written."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from ..control.activity import FLUSH, MOST_FINISHED, RENEW, RunningJob, add_finished, put_running
from ..control.history import record_runs
from ..control.settled import Outcome, SettledRun
from ..observability.logs import Quiet
from ..ports.capabilities import Capability
from ..ports.messages import JobMessage, schedule_of
from ..ports.protocols import BrokerProtocol
from .events import reraise_if_cancelled

log = logging.getLogger("framework_m.worker")

_MOST_TICKED = 10_000  # settled runs of schedules waiting for a write at most
_Run = tuple[JobMessage, int, float]  # the message, its attempt, when it started
_Done = tuple[JobMessage, int, Outcome, "float | None", float, "str | None"]


class Activity:
    """What one worker runs and has just settled, kept in the broker for lists by state."""

    def __init__(self, broker: BrokerProtocol, replica: str) -> None:
        self.broker = broker
        self.replica = replica
        self.on = Capability.STORE in broker.capabilities
        self._runs: dict[int, _Run] = {}
        self._done: deque[_Done] = deque(maxlen=MOST_FINISHED)
        self._ticked: deque[tuple[str, _Done]] = deque(maxlen=_MOST_TICKED)
        self._changed = False  # the runs changed since they were last written
        self._listed = False  # the last write listed runs (an empty list is due once)
        self._written_at = -FLUSH
        self._timer: asyncio.TimerHandle | None = None
        self._writing: asyncio.Task[None] | None = None
        self._quiet = Quiet()  # a failing write is said once a minute

    def started(self, token: int, message: JobMessage, attempt: int) -> None:
        """A run of ``message`` started (``token`` names it until :meth:`stopped`)."""
        if self.on:
            self._runs[token] = (message, attempt, time.time())
            self._changed = True
            self._soon()

    def stopped(self, token: int) -> None:
        if self._runs.pop(token, None) is not None:
            self._changed = True
            self._soon()

    def settled(
        self,
        message: JobMessage,
        attempt: int,
        outcome: Outcome,
        started_at: float | None,
        error: str | None,
    ) -> None:
        """A delivery of ``message`` was settled as ``outcome``."""
        if self.on:
            done = (message, attempt, outcome, started_at, time.time(), error)
            self._done.append(done)
            dedup = message.deduplication_id
            if dedup is not None and (schedule := schedule_of(dedup)) is not None:
                self._ticked.append((schedule, done))
            self._soon()

    def _soon(self) -> None:
        """Write within a :data:`FLUSH` of the last write (a write under way schedules
        the next as it ends)."""
        if self._writing is not None:
            return
        loop = asyncio.get_running_loop()
        at = max(loop.time(), self._written_at + FLUSH)
        if self._timer is not None:
            if self._timer.when() <= at:
                return
            self._timer.cancel()  # a renewal set further off
        self._timer = loop.call_at(at, self._begin_write)

    def _begin_write(self) -> None:
        self._timer = None
        self._writing = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        loop = asyncio.get_running_loop()
        self._written_at = loop.time()
        done = [self._settled(d) for d in self._done]
        self._done.clear()
        ticked: dict[str, list[SettledRun]] = {}
        for schedule, d in self._ticked:
            ticked.setdefault(schedule, []).append(self._settled(d))
        self._ticked.clear()
        listing = self._changed or bool(self._runs) or self._listed
        runs = [
            RunningJob(m.id, m.job_name, a, at, m.scheduled_at, self.replica)
            for m, a, at in self._runs.values()
        ]
        self._changed = False
        try:
            if listing:
                await put_running(self.broker, self.replica, runs)
                self._listed = bool(runs)
            if done and not await add_finished(self.broker, self.replica, done):
                self._warn("other writers won every round")
            for schedule, kept in ticked.items():
                if not await record_runs(self.broker, schedule, kept):
                    self._warn(f"schedule {schedule}'s history: other writers won every round")
        except Exception as exc:
            reraise_if_cancelled()
            self._warn(str(exc) or type(exc).__name__)
        finally:
            self._writing = None
        if self._done or self._ticked or self._changed:
            self._soon()
        elif self._runs:  # renewed while runs go on: a dead replica's runs drop out
            self._timer = loop.call_at(self._written_at + RENEW, self._begin_write)

    def _settled(self, done: _Done) -> SettledRun:
        message, attempt, outcome, started_at, finished_at, error = done
        return SettledRun(
            message.id, message.job_name, self.replica, attempt, outcome, started_at,
            finished_at, error, message.scheduled_at,
        )  # fmt: skip

    def _warn(self, why: str) -> None:
        log.log(self._quiet.level(), "the lists by state or a history not written (%s)", why)

    async def settle(self, timeout: float) -> None:
        """Write what is pending now and wait up to ``timeout`` seconds (the worker
        stops): its runs are gone, its last settled deliveries kept."""
        if not self.on:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._writing is not None:
            await asyncio.wait({self._writing}, timeout=timeout)
        if self._done or self._ticked or self._listed or self._changed:
            self._runs.clear()
            self._changed = True
            await asyncio.wait_for(self._write(), timeout)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

"""The statuses a worker keeps of the jobs it runs: running, then how each attempt ended.

Sent as memos (brokers with :attr:`~.Capability.STORE`; not waiting for an answer where
the store can, :meth:`~.StoreProtocol.send`) before the delivery is settled, so a job
whose status says it finished has finished; a send that fails is logged and never
fails the job. A run says running once it has run for
:data:`RUNNING_AFTER` seconds (:class:`RunningStatuses`): one that ends sooner goes
straight from queued to how it ended, which saves most jobs a write. A job keeps its
status for its ``keep`` (the message's, else the job's ``keep_result``); 0 writes
nothing, unless the job was enqueued by name without one, whose enqueue made a record
this closes (without the result).
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..control import keys
from ..control.shared import shared
from ..jobs import DEFAULT_KEEP, JobSpec
from ..observability.logs import Quiet
from ..observability.observer import Observer
from ..ports.batching import Calls, PassBatch, answer
from ..ports.capabilities import Capability
from ..ports.messages import JobMessage
from ..ports.protocols import BrokerProtocol
from ..ports.statuses import (
    JobState,
    JobStatus,
    decode_status,
    encode_status,
    pending_ttl,
)
from .fences import Fence

log = logging.getLogger("framework_m.worker")

#: Seconds a run goes on before its status says running.
RUNNING_AFTER = 0.1
# The states an attempt ends a job in and that settle it with an ack.
_ENDED = frozenset({JobState.SUCCEEDED, JobState.CANCELLED})


class StatusWriter:
    """Writes the status memos of one worker's jobs."""

    def __init__(self, broker: BrokerProtocol, observer: Observer) -> None:
        self.broker = broker
        self.observer = observer
        self.on = Capability.STORE in broker.capabilities
        self._quiet = Quiet()  # a failing write is said once a minute
        # the statuses of one pass of the event loop go in one send
        self._sending: PassBatch[tuple[str, bytes, float], None] = PassBatch(self._send)

    def keep(self, spec: JobSpec | None, message: JobMessage) -> tuple[float, bool]:
        """Seconds to keep ``message``'s finished status (0: none), and whether with
        its result; ``spec`` None for a job this app does not have (never a result)."""
        if not self.on:
            return 0.0, False
        if message.keep is not None:
            return message.keep, message.keep > 0 and spec is not None
        if spec is not None and spec.keep_result > 0:
            return spec.keep_result, True
        return DEFAULT_KEEP, False  # enqueued by name: close the enqueue's record

    async def running(self, spec: JobSpec, message: JobMessage, attempt: int) -> None:
        keep, _ = self.keep(spec, message)
        if keep > 0:
            now = time.time()
            status = _status(message, JobState.RUNNING, attempt, started_at=now)
            await self._put(status, pending_ttl(keep, None, now))

    async def retrying(
        self,
        spec: JobSpec,
        message: JobMessage,
        attempt: int,
        error: str,
        delay: float,
        traceback: str | None = None,
    ) -> None:
        keep, _ = self.keep(spec, message)
        if keep > 0:
            now = time.time()
            status = _status(
                message,
                JobState.SCHEDULED,
                attempt,
                due_at=now + delay,
                error=error,
                traceback=traceback,
            )
            await self._put(status, pending_ttl(keep, now + delay, now))

    async def finished(
        self,
        spec: JobSpec | None,
        message: JobMessage,
        state: JobState,
        attempt: int,
        *,
        error: str | None = None,
        result_json: str | None = None,
        started_at: float | None = None,
        traceback: str | None = None,
    ) -> None:
        """Keep how ``message`` ended; ``spec`` None for a job this app does not have
        (kept as the message says, else for the default)."""
        keep, with_result = self.keep(spec, message)
        if keep <= 0:
            return
        status = _status(
            message,
            state,
            attempt,
            started_at=started_at,
            finished_at=time.time(),
            error=error,
            has_result=with_result and result_json is not None,
            traceback=traceback,
        )
        await self._put(status, keep, result_json if status.has_result else None)

    async def finished_before(self, spec: JobSpec, message: JobMessage) -> JobStatus | None:
        """For a delivery after the first: the status of ``message``'s job if an earlier
        attempt finished it (succeeded, or cancelled: skipped, expired or by request);
        else None, also when it keeps no status or the status cannot be read."""
        if self.keep(spec, message)[0] <= 0:
            return None
        try:
            found = await shared(self.broker).get_memo(keys.status(message.id))
            status = None if found is None else decode_status(message.id, found)
        except Exception as exc:  # not known to have finished: it runs, as it would have
            self.observer.broker_error("memo")
            log.warning("%s: its status could not be read (%s); running it", message.id, exc)
            return None
        return status if status is not None and status.state in _ENDED else None

    async def _put(self, status: JobStatus, ttl: float, result_json: str | None = None) -> None:
        try:
            await self._sending.submit(
                (keys.status(status.job_id), encode_status(status, result_json), ttl)
            )
        except Exception as exc:
            self.observer.broker_error("memo")
            log.log(
                self._quiet.level(), "%s: status %s not kept (%s)", status.job_id, status.state, exc
            )

    async def _send(self, calls: Calls[tuple[str, bytes, float], None]) -> None:
        await shared(self.broker).send_memos([memo for memo, _ in calls])
        for _, sent in calls:
            answer(sent, None)


class Running:
    """A run whose running status is due at ``due`` (the event loop's time), and its
    write once begun."""

    __slots__ = ("attempt", "due", "fence", "message", "spec", "writing")

    def __init__(
        self, spec: JobSpec, message: JobMessage, attempt: int, due: float, fence: Fence | None
    ) -> None:
        self.spec, self.message, self.attempt, self.due = spec, message, attempt, due
        self.fence = fence  # a run that may have lost its delivery says nothing
        self.writing: asyncio.Task[None] | None = None


class RunningStatuses:
    """The running statuses of one worker's runs, each written once its run has gone on
    for :data:`RUNNING_AFTER` seconds. One timer writes them all, only while runs go on:
    every run is due the same time after its start, so appending keeps them in due
    order, and a run that ends sooner costs two dict operations (no task, no timer)."""

    def __init__(self, writer: StatusWriter) -> None:
        self._writer = writer
        self._runs: dict[int, Running] = {}
        self._timer: asyncio.TimerHandle | None = None

    def start(
        self, spec: JobSpec, message: JobMessage, attempt: int, fence: Fence | None = None
    ) -> Running | None:
        """A run begins; None when its job keeps no status. A run whose ``fence`` is
        not fresh when its status is due writes none (it may be another's by then)."""
        if self._writer.keep(spec, message)[0] <= 0:
            return None
        loop = asyncio.get_running_loop()
        run = Running(spec, message, attempt, loop.time() + RUNNING_AFTER, fence)
        self._runs[id(run)] = run
        if self._timer is None:
            self._timer = loop.call_at(run.due, self._write_due)
        return run

    async def done(self, run: Running | None) -> None:
        """The run ended: a write not begun never is, one begun lands before the final."""
        if run is None:
            return
        self._runs.pop(id(run), None)
        if run.writing is not None:
            await asyncio.shield(run.writing)

    def _write_due(self) -> None:
        """Begin the writes of the runs now due; again at the next one's time while
        runs go on (the timer left running when the runs it was set for ended sooner)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        for run in list(self._runs.values()):
            if run.due > now:
                break
            del self._runs[id(run)]
            if run.fence is not None and not run.fence.fresh():
                continue
            run.writing = loop.create_task(self._writer.running(run.spec, run.message, run.attempt))
        first = next(iter(self._runs.values()), None)
        self._timer = None if first is None else loop.call_at(first.due, self._write_due)


def _status(
    message: JobMessage,
    state: JobState,
    attempt: int,
    *,
    due_at: float | None = None,
    started_at: float | None = None,
    finished_at: float | None = None,
    error: str | None = None,
    has_result: bool = False,
    traceback: str | None = None,
) -> JobStatus:
    return JobStatus(
        message.id,
        state,
        message.job_name,
        attempt,
        enqueued_at=message.enqueued_at,
        due_at=due_at,
        started_at=started_at,
        finished_at=finished_at,
        slot=message.scheduled_at,
        error=error,
        has_result=has_result,
        traceback=traceback,
    )

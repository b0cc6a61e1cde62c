"""Asking what became of a job: its status, its result (waiting for it), the job of a slot.

Every function takes a connected broker with :attr:`~.Capability.STORE` and raises
:class:`~.errors.BrokerError` when it has none or cannot be reached.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Sequence
from typing import Any

from ..errors import (
    BrokerError,
    InvalidJobError,
    JobCancelledError,
    JobFailedError,
    ResultTimeoutError,
    UnknownJobError,
)
from ..ports.capabilities import Capability
from ..ports.messages import MAX_ID_LENGTH, tick_deduplication_id
from ..ports.protocols import BrokerProtocol
from ..ports.statuses import (
    CANCELS,
    LATEST_CANCEL,
    JobState,
    JobStatus,
    decode_status,
    pending_ttl,
)
from . import keys
from .checks import MAX_MEMO_TTL
from .runtime_schedules import contention_pause
from .shared import shared

#: The longest ``wait_result`` waits, in seconds.
MAX_WAIT = 86_400.0
_PENDING = (JobState.QUEUED, JobState.SCHEDULED)
_POLL = (0.05, 1.0)  # first and longest pause between two reads while waiting


def validate_job_id(job_id: object) -> str:
    """``job_id`` if it can be a job id (printable, no spaces), else InvalidJobError."""
    if (
        not isinstance(job_id, str)
        or not 0 < len(job_id) <= MAX_ID_LENGTH
        or not all("!" <= c <= "~" for c in job_id)
    ):
        raise InvalidJobError(
            f"a job id is 1-{MAX_ID_LENGTH} printable characters without spaces, got {job_id!r}"
        )
    return job_id


def _need_memos(broker: BrokerProtocol) -> None:
    if Capability.STORE not in broker.capabilities:
        raise BrokerError(
            f"{broker.display_url} keeps no job statuses (it lacks the 'store' capability)"
        )


async def job_status(broker: BrokerProtocol, job_id: str) -> JobStatus:
    """The status of ``job_id`` as the fleet last kept it; state ``unknown`` when none is
    kept (never enqueued, enqueued with ``keep_result=0``, or expired)."""
    (status,) = await job_statuses(broker, [job_id])
    return status


async def job_statuses(broker: BrokerProtocol, job_ids: Sequence[str]) -> list[JobStatus]:
    """:func:`job_status` of each of ``job_ids``, in two store calls at most."""
    job_ids = [validate_job_id(job_id) for job_id in job_ids]
    _need_memos(broker)
    found = await shared(broker).get_memos([keys.status(job_id) for job_id in job_ids])
    statuses = [
        JobStatus(job_id, JobState.UNKNOWN) if value is None else decode_status(job_id, value)
        for job_id, value in zip(job_ids, found, strict=True)
    ]
    # cancelled before any run started: the mark says so until a worker settles it
    pending = [i for i, s in enumerate(statuses) if s.state in _PENDING]
    marks = await shared(broker).get_memos([keys.cancel_mark(job_ids[i]) for i in pending])
    for i, mark in zip(pending, marks, strict=True):
        if mark is not None:
            statuses[i] = dataclasses.replace(
                statuses[i],
                state=JobState.CANCELLED,
                finished_at=_mark_time(mark),
                error="cancelled by request",
            )
    return statuses


def _mark_time(mark: bytes) -> float | None:
    """When a cancel mark was set (unix time), if it says."""
    try:
        at = float(mark.decode())
    except (UnicodeDecodeError, ValueError):
        return None
    return at if math.isfinite(at) else None


async def wait_result(broker: BrokerProtocol, job_id: str, *, timeout: float) -> Any:
    """The return value of ``job_id`` once it succeeded, waiting up to ``timeout`` seconds.

    Raises :class:`~.errors.JobFailedError` (its ``error`` says why) when the job
    failed, :class:`~.errors.JobCancelledError` when it will not run,
    :class:`~.errors.UnknownJobError` when no status is kept, or succeeded without
    keeping its value (``keep_result=0``), and :class:`~.errors.ResultTimeoutError`
    when it has not finished in time.
    """
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or not 0 <= timeout <= MAX_WAIT
    ):
        raise InvalidJobError(f"timeout must be 0 to {MAX_WAIT:g} seconds, got {timeout!r}")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pause = _POLL[0]
    while True:
        status = await job_status(broker, job_id)
        if status.state.finished or status.state is JobState.UNKNOWN:
            return _outcome(status)
        left = deadline - loop.time()
        if left <= 0:
            raise ResultTimeoutError(
                f"job {job_id} has not finished within {timeout:g}s (it is {status.state})",
                status,
            )
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 1.5, _POLL[1])


def _outcome(status: JobStatus) -> Any:
    job = f"job {status.job_id}" + (f" ({status.job_name})" if status.job_name else "")
    if status.state is JobState.SUCCEEDED:
        if not status.has_result:
            raise UnknownJobError(f"{job} succeeded but kept no result (keep_result=0)", status)
        return status.result
    if status.state is JobState.FAILED:
        raise JobFailedError(f"{job} failed: {status.error}", status, status.error)
    if status.state is JobState.CANCELLED:
        raise JobCancelledError(f"{job} was cancelled: {status.error or 'by request'}", status)
    raise UnknownJobError(
        f"{job} is unknown: never enqueued here, kept no status, or its status expired"
    )


async def job_of_slot(broker: BrokerProtocol, schedule: str, slot: int) -> str | None:
    """The id of the job enqueued for ``schedule``'s slot at ``slot`` (unix seconds; a
    job's name, or ``@{id}`` for a runtime schedule), or None when none is kept."""
    _need_memos(broker)
    if isinstance(slot, bool) or not isinstance(slot, int) or slot < 0:
        raise InvalidJobError(f"a slot is a whole unix time in seconds, got {slot!r}")
    found = await shared(broker).get_memo(keys.slot(tick_deduplication_id(schedule, slot)))
    if found is None:
        return None
    try:
        return validate_job_id(found.decode())
    except (UnicodeDecodeError, InvalidJobError):
        raise BrokerError(f"the slot record of {schedule} at {slot} is malformed") from None


async def cancel_job(broker: BrokerProtocol, job_id: str) -> bool:
    """Cancel ``job_id``; True when it will not run or is being stopped.

    A job still waiting (queued, delayed, waiting to retry) never runs and its status
    says cancelled at once (read from the cancel mark, so a run that started as the
    cancel came shows as running, not cancelled). A running one is stopped within
    about two seconds on whichever replica runs it (an ``async def`` handler is
    cancelled, a ``def`` one sees ``ctx.cancelled``), is not retried, and its status
    then says cancelled; a run that ends before the stop reaches it keeps the status
    it ended with (succeeded, failed): a status says cancelled only of a job that was
    stopped or never ran. False when the job finished already or no status of it is
    kept (a job that keeps none cannot be cancelled). The mark expires a day after the
    job's due time.
    """
    (cancelled,) = await cancel_jobs(broker, [job_id])
    return cancelled


async def cancel_jobs(broker: BrokerProtocol, job_ids: Sequence[str]) -> list[bool]:
    """:func:`cancel_job` of each of ``job_ids``: their statuses read in one batch, their
    marks set in one, and the running replicas told once."""
    statuses = await job_statuses(broker, job_ids)
    now = time.time()
    marks = [
        (keys.cancel_mark(s.job_id), repr(now).encode(), pending_ttl(0.0, s.due_at, now), False)
        for s in statuses
        if not (s.state.finished or s.state is JobState.UNKNOWN)
    ]
    if marks:
        await shared(broker).put_memos(marks)
        await shared(broker).put_memo(LATEST_CANCEL, repr(now).encode(), ttl=MAX_MEMO_TTL)
        await _announce(broker)
    return [not (s.state.finished or s.state is JobState.UNKNOWN) for s in statuses]


async def _announce(broker: BrokerProtocol) -> None:
    """Move the cancels record on, so that workers look at their running jobs' marks."""
    if Capability.STORE not in broker.capabilities:
        return
    for attempt in range(50):
        await contention_pause(attempt)
        entry = await shared(broker).read_state(CANCELS)
        count = int(entry.value) if entry is not None and entry.value.isdigit() else 0
        version = None if entry is None else entry.version
        if (
            await shared(broker).write_state(CANCELS, b"%d" % (count + 1), version=version)
            is not None
        ):
            return
    raise BrokerError("cancel: the cancels record kept changing; the mark is set, try again")

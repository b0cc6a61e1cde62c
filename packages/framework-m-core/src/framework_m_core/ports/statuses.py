"""A job's status record: what the fleet last said about one job, kept as a memo.

The memo ``job:{id}`` holds a JSON object, version 1::

    {"v": 1, "job": "report", "state": "succeeded", "attempts": 1,
     "enqueued_at": 1700000000.25, "due_at": null, "started_at": 1700000000.3,
     "finished_at": 1700000001.1, "slot": null, "error": null, "result": 42}

``result`` is present only in a succeeded record whose job keeps results. Every
record read from a broker is validated by :func:`decode_status`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ..control.checks import MAX_MEMO_TTL
from ..errors import BrokerError, FrameworkMError
from .messages import MAX_ID_LENGTH, JobMessage, loads_strict

STATUS_VERSION = 1
#: The largest return value kept, in bytes of JSON; a larger one fails the attempt.
MAX_RESULT = 65_536
#: The most characters of an error a record keeps.
MAX_ERROR = 2_000
#: Characters of a failed attempt's traceback a status keeps (the innermost lines).
MAX_TRACEBACK = 8_000
#: Seconds at least that a record of a job not finished yet lasts (a long queue).
PENDING_KEEP = 86_400.0
# One encoder: json.dumps with options builds a new one each call.
_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
_quote = json.encoder.encode_basestring_ascii


class JobState(StrEnum):
    """Where a job is, as :func:`~framework_m_core.control.jobs.job_status` reports it."""

    QUEUED = "queued"  # stored, waiting for a worker
    SCHEDULED = "scheduled"  # delayed, or waiting to be retried
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # dead-lettered: out of attempts, or not runnable
    CANCELLED = "cancelled"  # will not run (cancelled, skipped or expired)
    UNKNOWN = "unknown"  # never seen, kept no status, or its status expired

    @property
    def finished(self) -> bool:
        return self in _FINISHED


_FINISHED = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


@dataclass(frozen=True, slots=True)
class JobStatus:
    """A job's state, attempts, times (unix seconds), and its result or error."""

    job_id: str
    state: JobState
    job_name: str | None = None
    attempts: int = 0
    enqueued_at: float | None = None
    due_at: float | None = None  # when it runs (delayed) or is retried
    started_at: float | None = None  # of the latest attempt
    finished_at: float | None = None
    slot: int | None = None  # unix seconds of the schedule slot, ticked jobs only
    error: str | None = None
    result: Any = None
    has_result: bool = False  # whether ``result`` was kept (None is a result too)
    traceback: str | None = None  # of the latest failed attempt, when it raised

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "job_id": self.job_id,
            "state": self.state.value,
            "job": self.job_name,
            "attempts": self.attempts,
            "enqueued_at": self.enqueued_at,
            "due_at": self.due_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "slot": self.slot,
            "error": self.error,
            "traceback": self.traceback,
        }
        if self.has_result:
            out["result"] = self.result
        return out


class ResultError(FrameworkMError):
    """A return value cannot be kept: not JSON, or larger than :data:`MAX_RESULT`."""


#: The state record whose version moves with every cancel: workers wait on it.
CANCELS = "jobs:cancels"
#: The memo holding the time of the latest cancel (unix seconds, as text), kept for the
#: longest memo ttl: no cancel mark outlives it.
LATEST_CANCEL = "cancels:latest"


def decode_latest_cancel(value: bytes | None) -> float | None:
    """The latest cancel's time; None when there was none, ``inf`` (every run reads
    its mark) when the memo holds anything else."""
    if value is None:
        return None
    try:
        found = float(value)
    except (ValueError, UnicodeDecodeError):
        return math.inf
    return found if math.isfinite(found) else math.inf


def encode_result(value: Any) -> str:
    """``value`` as strict JSON within :data:`MAX_RESULT` bytes; ResultError else."""
    try:
        text = "null" if value is None else _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ResultError(f"the return value is not JSON ({exc}): return JSON data") from None
    size = len(text.encode())
    if size > MAX_RESULT:
        raise ResultError(
            f"the return value is {size:,} bytes of JSON, more than the {MAX_RESULT:,} kept: "
            "return less (store large results elsewhere and return where)"
        )
    return text


def encode_status(status: JobStatus, result_json: str | None = None) -> bytes:
    """The memo of ``status``; ``result_json`` (from :func:`encode_result`) its result."""
    # Written for every job a worker runs: formatted directly, only the free-form texts
    # through the escaper (the same JSON the encoder would write).
    job = "null" if status.job_name is None else _quote(status.job_name)
    error = "null" if status.error is None else _quote(status.error[:MAX_ERROR])
    slot = "null" if status.slot is None else str(int(status.slot))
    result = "" if result_json is None else f',"result":{result_json}'
    if status.traceback is not None:
        result += f',"traceback":{_quote(status.traceback[-MAX_TRACEBACK:])}'
    return (
        f'{{"v":{STATUS_VERSION},"state":"{status.state.value}","job":{job},'
        f'"attempts":{int(status.attempts)},"enqueued_at":{_time(status.enqueued_at)},'
        f'"due_at":{_time(status.due_at)},"started_at":{_time(status.started_at)},'
        f'"finished_at":{_time(status.finished_at)},"slot":{slot},"error":{error}{result}}}'
    ).encode()


def _time(value: float | None) -> str:
    if value is None:
        return "null"
    if not math.isfinite(value):
        raise ValueError(f"a status time must be finite, got {value!r}")
    return repr(float(value))


def decode_status(job_id: str, value: bytes) -> JobStatus:
    """The status record in ``value``; BrokerError saying what is wrong when it is not one."""
    try:
        data = loads_strict(value)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _malformed(job_id, f"not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("v") != STATUS_VERSION:
        raise _malformed(job_id, "not a version-1 object")
    try:
        state = JobState(str(data.get("state")))
    except ValueError:
        raise _malformed(job_id, f"unknown state {str(data.get('state'))[:40]!r}") from None
    name, attempts = _text(job_id, data, "job", MAX_ID_LENGTH), data.get("attempts")
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
        raise _malformed(job_id, "field 'attempts' is not a count")
    error = _text(job_id, data, "error", MAX_ERROR)
    trace = _text(job_id, data, "traceback", MAX_TRACEBACK)
    times = {k: data.get(k) for k in ("enqueued_at", "due_at", "started_at", "finished_at")}
    for k, v in times.items():
        if v is not None and not _is_time(v):
            raise _malformed(job_id, f"field {k!r} is not a unix time")
    slot = data.get("slot")
    if slot is not None and (isinstance(slot, bool) or not isinstance(slot, int)):
        raise _malformed(job_id, "field 'slot' is not a whole unix time")
    at = {k: None if v is None else float(v) for k, v in times.items()}
    return JobStatus(
        job_id,
        state,
        name,
        attempts,
        enqueued_at=at["enqueued_at"],
        due_at=at["due_at"],
        started_at=at["started_at"],
        finished_at=at["finished_at"],
        slot=slot,
        error=error,
        result=data.get("result"),
        has_result="result" in data,
        traceback=trace,
    )


def _text(job_id: str, data: dict[str, Any], field: str, most: int) -> str | None:
    """Field ``field`` of a status record: None, or text of at most ``most`` characters."""
    value = data.get(field)
    if value is not None and (not isinstance(value, str) or len(value) > most):
        raise _malformed(job_id, f"field {field!r} is not text of at most {most} characters")
    return value


def _is_time(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value < 253402300800
    )


def _malformed(job_id: str, why: str) -> BrokerError:
    return BrokerError(f"the status record of job {job_id} is malformed: {why}")


def pending_ttl(keep: float, due_at: float | None, now: float) -> float:
    """How long a record of a job not finished yet lasts: through a long queue or its
    delay, and then its ``keep``."""
    wait = 0.0 if due_at is None else max(0.0, due_at - now)
    return min(MAX_MEMO_TTL, max(keep, PENDING_KEEP) + wait)


def enqueued_status(message: JobMessage, job_id: str) -> JobStatus:
    """The record of a job just stored: queued, or scheduled while its due time is ahead."""
    due = message.not_before
    return JobStatus(
        job_id,
        JobState.SCHEDULED if due is not None else JobState.QUEUED,
        message.job_name,
        enqueued_at=message.enqueued_at,
        due_at=due,
        slot=message.scheduled_at,
    )

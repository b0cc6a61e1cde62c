"""A framework-m job status as Django's ``TaskResult``."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from django.conf import settings
from django.tasks.base import TaskError, TaskResult, TaskResultStatus
from django.utils import timezone

from framework_m_core import JobState, JobStatus

if TYPE_CHECKING:
    from .registry import AnyResult, AnyTask

_STATES = {
    JobState.QUEUED: TaskResultStatus.READY,
    JobState.SCHEDULED: TaskResultStatus.READY,  # delayed, or waiting to be retried
    JobState.RUNNING: TaskResultStatus.RUNNING,
    JobState.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobState.FAILED: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
}
_CLASS_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
#: The worker id a result names for each attempt: framework-m keeps attempts, not replicas.
WORKER = "framework-m"


def task_result(task: AnyTask, status: JobStatus, alias: str) -> AnyResult:
    """``status`` of a job of ``task`` as Django's result. Its ``args`` and ``kwargs`` are
    empty: framework-m keeps a job's arguments in its message only."""
    result = TaskResult(
        task=task,
        id=status.job_id,
        status=_STATES.get(status.state, TaskResultStatus.READY),
        enqueued_at=django_time(status.enqueued_at),
        started_at=django_time(status.started_at),
        finished_at=django_time(status.finished_at),
        last_attempted_at=django_time(status.started_at),
        args=[],
        kwargs={},
        backend=alias,
        errors=_errors(status),
        worker_ids=[WORKER] * status.attempts,
    )
    if status.state is JobState.SUCCEEDED:
        object.__setattr__(result, "_return_value", status.result)
    return result


def django_time(unix: float | None) -> datetime | None:
    """A status time as Django keeps times: aware with USE_TZ, else naive local."""
    if unix is None:
        return None
    at = datetime.fromtimestamp(unix, UTC)
    return at if settings.USE_TZ else timezone.make_naive(at)


def _errors(status: JobStatus) -> list[TaskError]:
    """The latest failed attempt's error, as Django describes one."""
    if status.state is JobState.CANCELLED:
        return [
            TaskError(
                exception_class_path="framework_m_core.errors.JobCancelledError",
                traceback=status.error or "cancelled",
            )
        ]
    if status.error is None or status.state not in (JobState.FAILED, JobState.SCHEDULED):
        return []
    trace = status.traceback or status.error
    return [TaskError(exception_class_path=exception_path(trace), traceback=trace)]


def exception_path(trace: str) -> str:
    """The exception's class path from a traceback's last line (``module.Class: ...``;
    a builtin is named without its module); ``builtins.Exception`` when it does not say."""
    last = trace.strip().splitlines()[-1] if trace.strip() else ""
    name = last.split(":", 1)[0].strip()
    if not _CLASS_PATH.fullmatch(name):
        return "builtins.Exception"
    return name if "." in name else f"builtins.{name}"

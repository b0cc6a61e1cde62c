"""``@periodic``: a Django task ticked by every worker replica and run once per slot."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, get_args

from django.tasks.base import Task

from framework_m_core import Schedule, ScheduleError
from framework_m_core.jobs import Overlap
from framework_m_core.scheduling.schedules import to_schedule

if TYPE_CHECKING:
    from .registry import AnyTask


@dataclass(frozen=True)
class Periodic:
    """When a task is ticked, and what a slot does while the previous run goes on."""

    schedule: Schedule
    overlap: Overlap


#: The schedule of each periodic task, by its module path.
SCHEDULES: dict[str, Periodic] = {}


def periodic(
    schedule: str | None = None,
    *,
    tz: str | None = None,
    every_seconds: float | timedelta | None = None,
    overlap: Overlap = "skip",
) -> Callable[[AnyTask], AnyTask]:
    """Tick the task below it by a cron ``schedule`` (in the IANA zone ``tz``, UTC by
    default) or ``every_seconds``; every ``m worker`` replica ticks it and each slot
    runs once. It goes above ``@task``, and the task takes no arguments::

        @periodic("0 9 * * *", tz="Europe/Berlin")
        @task
        def morning_report() -> None: ...

    ``overlap`` is the job's (``"skip"``: a slot whose previous run still goes on is
    skipped). Raises :class:`~framework_m_core.ScheduleError` for a bad expression or
    zone, and TypeError when it is not above a task.
    """
    if (schedule is None) == (every_seconds is None):
        raise ScheduleError("@periodic takes a cron schedule or every_seconds, one of the two")
    when = to_schedule(schedule, tz=tz, interval=every_seconds)
    assert when is not None
    if overlap not in get_args(Overlap):
        raise ScheduleError(
            f"overlap must be one of {', '.join(get_args(Overlap))}, got {overlap!r}"
        )

    def mark(task: AnyTask) -> AnyTask:
        if not isinstance(task, Task):
            raise TypeError(f"@periodic goes above @task: it schedules a Django task, got {task!r}")
        SCHEDULES[task.module_path] = Periodic(when, overlap)
        return task

    return mark

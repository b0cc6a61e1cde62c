"""``framework_m_django.TaskBackend``: Django's tasks stored on a framework-m broker.

A task is enqueued as the framework-m job named by its module path
(``shop.tasks.send_receipt``) with kwargs ``{"args": [...], "kwargs": {...}}``; the
result id is the job id; ``get_result`` reads the job's status. Workers run the tasks
(:mod:`.worker`).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core import checks
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import DEFAULT_TASK_QUEUE_NAME, Task, TaskResult, TaskResultStatus
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from framework_m_core import (
    ConfigurationError,
    InvalidJobError,
    JobState,
    SyncClient,
    open_broker,
)
from framework_m_core.blocking.client import DEFAULT_TIMEOUT
from framework_m_core.ports.messages import validate_job_name

from . import clients
from .registry import FrameworkMTask
from .results import task_result

if TYPE_CHECKING:
    from .registry import AnyResult, AnyTask

#: The OPTIONS a backend reads; any other is refused by ``manage.py check``.
OPTIONS = ("broker_url", "timeout", "max_attempts", "task_modules", "outbox")


class TaskBackend(BaseTaskBackend):
    """Django's tasks on framework-m: ``OPTIONS = {"broker_url": ...}``, and optionally
    ``timeout`` (seconds an enqueue waits for the broker, 30), ``max_attempts`` (of each
    task, 3), ``task_modules`` (modules defining tasks besides each app's ``tasks``) and
    ``outbox`` (a database alias: enqueue writes an outbox row in that database's
    transaction, for ``m worker --outbox-url`` to relay; needs framework-m-outbox)."""

    task_class = FrameworkMTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = False  # one queue, first in first out

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.broker_url: Any = self.options.get("broker_url")
        self.timeout: Any = self.options.get("timeout", DEFAULT_TIMEOUT)
        self.max_attempts: Any = self.options.get("max_attempts", 3)
        self.task_modules: Any = self.options.get("task_modules", [])
        self.outbox: Any = self.options.get("outbox")
        self._option_problems: list[tuple[str, str]] | None = (
            None  # the options' problems, once read
        )

    # -- checks -------------------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """``manage.py check``: the options, the URL and the queues, before any enqueue."""
        return [
            checks.Error(f"TASKS[{self.alias!r}]: {problem}", id=f"framework_m_django.{code}")
            for code, problem in self._problems()
        ]

    def _problems(self) -> list[tuple[str, str]]:
        found: list[tuple[str, str]] = []
        if unknown := sorted(set(self.options) - set(OPTIONS)):
            found.append(("E001", f"unknown OPTIONS {unknown}: it reads {list(OPTIONS)}"))
        if not isinstance(self.broker_url, str) or not self.broker_url:
            found.append(("E002", "OPTIONS needs broker_url, the workers' broker URL"))
        elif self.broker_url.startswith("memory:"):
            found.append(("E003", "memory:// lives in one process: no worker would see a task"))
        else:
            try:
                open_broker(self.broker_url)
            except ConfigurationError as exc:
                found.append(("E004", f"broker_url: {exc}"))
        if not _positive(self.timeout):
            found.append(("E005", f"timeout must be seconds > 0, got {self.timeout!r}"))
        if not (isinstance(self.max_attempts, int) and 1 <= self.max_attempts <= 1000):
            found.append(("E006", f"max_attempts must be 1 to 1000, got {self.max_attempts!r}"))
        if not isinstance(self.task_modules, list | tuple) or not all(
            isinstance(m, str) for m in self.task_modules
        ):
            found.append(("E007", "task_modules must be a list of module names"))
        if self.outbox is not None:
            found += _outbox_problems(self.outbox)
        if self.queues != {DEFAULT_TASK_QUEUE_NAME}:
            found.append((
                "E008",
                f"QUEUES {sorted(self.queues)}: a backend's tasks share the queue of its "
                f"broker_url, named {DEFAULT_TASK_QUEUE_NAME!r}; give each other queue a "
                "backend of its own (another broker_url or ?queue=)",
            ))  # fmt: skip
        return found

    def validate_task(self, task: AnyTask) -> None:
        super().validate_task(task)
        try:
            validate_job_name(task.module_path)
        except InvalidJobError as exc:
            raise InvalidTask(f"{task.module_path} cannot name a framework-m job: {exc}") from None

    # -- enqueue and results ---------------------------------------------------------------

    def enqueue(  # type: ignore[override]
        self, task: AnyTask, args: Sequence[Any], kwargs: dict[str, Any]
    ) -> AnyResult:
        """Store a job of ``task`` (held until ``run_after``, when set) once its arguments
        bind to the function and are JSON; blocks until the broker stored it, or with
        ``outbox`` writes its row in that database's current transaction."""
        self.validate_task(task)
        job_kwargs = _arguments(task, args, kwargs)
        self._check_options()
        name = task.module_path
        when = None if task.run_after is None else _aware(task.run_after)
        try:
            if self.outbox is not None:  # a row in the current transaction of that database
                from django.db import connections

                from framework_m_outbox import Outbox

                outbox = Outbox(connections[self.outbox])
                if when is not None:
                    job: str = outbox.enqueue_at_sync(when, name, **job_kwargs)
                else:
                    job = outbox.enqueue_sync(name, **job_kwargs)
            elif when is not None:
                job = self._client().enqueue_at(when, name, **job_kwargs)
            else:
                job = self._client().enqueue(name, **job_kwargs)
        except InvalidJobError as exc:
            raise InvalidTask(f"{name}: {exc}") from None
        result = TaskResult(
            task=task,
            id=str(job),
            status=TaskResultStatus.READY,
            enqueued_at=timezone.now(),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=job_kwargs["args"],
            kwargs=job_kwargs["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> AnyResult:
        """The result of job ``result_id`` from its status; TaskResultDoesNotExist when
        no status is kept (never enqueued, expired, ``keep_result`` 0) or its job is no
        task of this project."""
        try:
            status = self._client().status(result_id)
        except InvalidJobError:
            raise TaskResultDoesNotExist(result_id) from None
        if status.state is JobState.UNKNOWN or status.job_name is None:
            raise TaskResultDoesNotExist(result_id)
        try:
            task = import_string(status.job_name)
        except ImportError:
            task = None
        if not isinstance(task, Task):
            raise TaskResultDoesNotExist(f"{result_id}: {status.job_name} is no task here")
        return task_result(task, status, self.alias)

    def _check_options(self) -> None:
        if self._option_problems is None:  # the settings': checked once, not per task
            self._option_problems = self._problems()
        if self._option_problems:
            raise InvalidTask(f"TASKS[{self.alias!r}]: {self._option_problems[0][1]}")

    def _client(self) -> SyncClient:
        self._check_options()
        return clients.client(self.broker_url, float(self.timeout))


def _outbox_problems(alias: object) -> list[tuple[str, str]]:
    """What keeps OPTIONS' ``outbox`` from naming a database an outbox can be in."""
    from django.db import connections

    if not isinstance(alias, str) or alias not in settings.DATABASES:
        return [("E009", f"outbox must be an alias of DATABASES, got {alias!r}")]
    try:
        import framework_m_outbox  # noqa: F401
    except ImportError:
        return [
            ("E010", "outbox needs framework-m-outbox: pip install ./packages/framework-m-outbox")
        ]
    vendor = connections[alias].vendor
    if vendor not in ("postgresql", "mysql", "sqlite"):
        return [
            ("E011", f"outbox: database {alias!r} is {vendor}, not PostgreSQL, MySQL or SQLite")
        ]
    return []


def _arguments(task: AnyTask, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The job's kwargs: the task's arguments as JSON, checked against its function."""
    try:
        positional: list[Any] = list(normalize_json(list(args)))  # type: ignore[arg-type]
        named: dict[str, Any] = dict(normalize_json(dict(kwargs)))  # type: ignore[arg-type]
    except TypeError as exc:
        raise InvalidTask(f"{task.module_path}: its arguments must be JSON: {exc}") from None
    context = [None] if task.takes_context else []
    try:
        inspect.signature(task.func).bind(*context, *positional, **named)
    except TypeError as exc:
        raise InvalidTask(f"{task.module_path}: {exc}") from None
    return {"args": positional, "kwargs": named}


def _aware(when: datetime) -> datetime:
    """``run_after`` as an aware time (a naive one, allowed without USE_TZ, is local)."""
    if timezone.is_aware(when):
        return when
    return timezone.make_aware(when) if settings.USE_TZ else when.astimezone()


def _positive(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )

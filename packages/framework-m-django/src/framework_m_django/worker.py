"""The worker's app of a Django project: ``DJANGO_SETTINGS_MODULE=mysite.settings m
worker --broker ...`` runs its tasks, with no ``--app``.

:func:`django_app` is an app provider (the ``framework_m.apps`` entry point): when
``DJANGO_SETTINGS_MODULE`` is set it sets Django up, imports every installed app's
``tasks`` module (and each backend's ``task_modules``), and registers each task made
with a :class:`~.backend.TaskBackend` as the framework-m job of its module path, ticked
when ``@periodic``. A ``def`` task runs in the worker's threads with the database
connections Django would close after a request closed around it; an ``async def`` one
on the event loop.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from datetime import UTC, datetime
from inspect import iscoroutinefunction
from typing import TYPE_CHECKING, Any

from framework_m_core import App, AppLoadError, JobContext

from .periodic import SCHEDULES
from .registry import TASKS

if TYPE_CHECKING:
    from .registry import AnyResult


def django_app() -> App | None:
    """The app of the Django project ``DJANGO_SETTINGS_MODULE`` names; None without it."""
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        return None
    import django

    django.setup()
    from django.tasks import task_backends
    from django.utils.module_loading import autodiscover_modules

    from .backend import TaskBackend

    backends = [b for b in task_backends.all() if isinstance(b, TaskBackend)]
    if not backends:
        raise AppLoadError(
            f"{os.environ['DJANGO_SETTINGS_MODULE']}: no TASKS backend is "
            "framework_m_django.TaskBackend, so no task runs on framework-m"
        )
    for backend in backends:
        if problems := backend._problems():
            raise AppLoadError(f"TASKS[{backend.alias!r}]: {problems[0][1]}")
    autodiscover_modules("tasks")
    for backend in backends:
        for module in backend.task_modules:
            importlib.import_module(module)
    attempts = {b.alias: b.max_attempts for b in backends}
    app = App()
    for path, task in sorted(TASKS.items()):
        periodic = SCHEDULES.get(path)
        app.job(
            name=path,
            max_attempts=attempts.get(task.backend, 3),
            schedule=periodic.schedule if periodic else None,
            overlap=periodic.overlap if periodic else "skip",
        )(_handler(task))
    return app


def _handler(task: Any) -> Callable[..., Any]:
    """The framework-m handler that runs ``task`` with a job's ``args`` and ``kwargs``."""
    from django.db import close_old_connections
    from django.utils.json import normalize_json

    if iscoroutinefunction(task.func):

        async def run_async(
            ctx: JobContext, args: list[Any] | None = None, kwargs: dict[str, Any] | None = None
        ) -> Any:
            head = _context(task, ctx, args, kwargs)
            return normalize_json(await task.func(*head, *(args or []), **(kwargs or {})))

        return run_async

    def run(
        ctx: JobContext, args: list[Any] | None = None, kwargs: dict[str, Any] | None = None
    ) -> Any:
        close_old_connections()
        try:
            head = _context(task, ctx, args, kwargs)
            return normalize_json(task.func(*head, *(args or []), **(kwargs or {})))
        finally:
            close_old_connections()

    return run


def _context(
    task: Any, ctx: JobContext, args: list[Any] | None, kwargs: dict[str, Any] | None
) -> list[Any]:
    """``[TaskContext]`` for a task that takes its context, else nothing."""
    if not task.takes_context:
        return []
    from django.tasks.base import TaskContext, TaskResult, TaskResultStatus

    from .results import WORKER, django_time

    now = datetime.now(UTC).timestamp()
    result: AnyResult = TaskResult(
        task=task,
        id=ctx.job_id,
        status=TaskResultStatus.RUNNING,
        enqueued_at=django_time(ctx.enqueued_at.timestamp()),
        started_at=django_time(now),
        finished_at=None,
        last_attempted_at=django_time(now),
        args=list(args or []),
        kwargs=dict(kwargs or {}),
        backend=task.backend,
        errors=[],
        worker_ids=[WORKER] * ctx.attempt,
    )
    return [TaskContext(task_result=result)]

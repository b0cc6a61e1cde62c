"""The application registry: jobs, their schedules and limits."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import Any, overload

from .errors import AppLoadError, InvalidJobError, JobDefinitionError
from .jobs import Handler, JobSpec
from .messages import validate_job_name
from .schedules import Schedule, to_schedule


class App:
    """Holds the jobs of an application.

    >>> app = App()
    >>> @app.job(every=5)
    ... async def heartbeat(ctx): ...
    """

    def __init__(
        self,
        *,
        max_attempts: int = 3,
        timeout: float | None = 300.0,
        backoff: float = 1.0,
        max_backoff: float = 300.0,
    ) -> None:
        self._defaults: dict[str, Any] = {
            "max_attempts": max_attempts,
            "timeout": timeout,
            "backoff": backoff,
            "max_backoff": max_backoff,
        }
        self._jobs: dict[str, JobSpec] = {}

    @overload
    def job(self, handler: Handler, /) -> Handler: ...

    @overload
    def job(
        self,
        handler: None = None,
        /,
        *,
        name: str | None = None,
        schedule: Schedule | str | None = None,
        tz: str | None = None,
        every: float | timedelta | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        backoff: float | None = None,
        max_backoff: float | None = None,
    ) -> Callable[[Handler], Handler]: ...

    def job(
        self,
        handler: Handler | None = None,
        /,
        *,
        name: str | None = None,
        schedule: Schedule | str | None = None,
        tz: str | None = None,
        every: float | timedelta | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        backoff: float | None = None,
        max_backoff: float | None = None,
    ) -> Handler | Callable[[Handler], Handler]:
        """Register an ``async def handler(ctx, **kwargs)`` as a job.

        ``schedule`` is a cron string (evaluated in ``tz``, default UTC) or a
        :class:`~.schedules.Schedule`; ``every`` is an interval in seconds or a
        timedelta. Limits default to the App's. Errors are raised at import time.
        """
        sched = to_schedule(schedule, tz=tz, interval=every)

        def register(fn: Handler) -> Handler:
            job_name = name if name is not None else getattr(fn, "__name__", None)
            try:
                job_name = validate_job_name(job_name)
            except InvalidJobError as exc:
                raise JobDefinitionError(str(exc)) from None
            if job_name in self._jobs:
                raise JobDefinitionError(f"job {job_name!r} is registered twice")
            self._jobs[job_name] = JobSpec(
                job_name,
                fn,
                sched,
                max_attempts=self._pick(max_attempts, "max_attempts"),
                timeout=timeout if timeout is not None else self._defaults["timeout"],
                backoff=self._pick(backoff, "backoff"),
                max_backoff=self._pick(max_backoff, "max_backoff"),
            )
            return fn

        return register(handler) if handler is not None else register

    def _pick(self, value: Any, key: str) -> Any:
        return value if value is not None else self._defaults[key]

    @property
    def jobs(self) -> Mapping[str, JobSpec]:
        """Every registered job by name."""
        return MappingProxyType(self._jobs)

    def scheduled(self) -> Iterator[JobSpec]:
        """The jobs that have a schedule."""
        return (spec for spec in self._jobs.values() if spec.schedule is not None)


def load_app(target: str) -> App:
    """Import ``module[:attr]`` (``attr`` defaults to ``app``) and return the :class:`App`."""
    if not target:
        raise AppLoadError("no app given: pass --app module[:attr] or set M_APP")
    module_name, _, attr = target.partition(":")
    attr = attr or "app"
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise AppLoadError(
            f"cannot import app module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from exc
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AppLoadError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(obj, App):
        raise AppLoadError(f"{target!r} is a {type(obj).__name__}, not a framework_m_core.App")
    return obj

"""The application registry: jobs, their schedules and limits."""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import sys
import sysconfig
import traceback
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Any, Concatenate, ParamSpec, TypeVar, overload

from .errors import AppLoadError, InvalidJobError, JobDefinitionError
from .handles import JobHandle
from .jobs import (
    DEFAULT_KEEP,
    DEFAULT_MAX_SNOOZES,
    DEFAULT_UNIQUE_FOR,
    Catchup,
    Handler,
    JobContext,
    JobSpec,
    Overlap,
    State,
)
from .ports.messages import validate_job_name
from .scheduling.schedules import Schedule, to_schedule

log = logging.getLogger("framework_m.worker")

P = ParamSpec("P")
R = TypeVar("R")

# ``async def hook(state)`` or ``def hook(state)``: sets up (or tears down) ``state``.
Hook = Callable[[State], Any]


class App:
    """Holds the jobs of an application.

    >>> app = App()
    >>> @app.job(every=5)
    ... async def heartbeat(ctx): ...

    :param max_attempts: deliveries of a job before it is dead-lettered, for the jobs
        that do not set their own (3).
    :param timeout: seconds an attempt may run before it is cancelled and fails; None
        for no limit (300).
    :param backoff: seconds before the second attempt; each later one waits twice the
        previous, with 10% jitter (1).
    :param max_backoff: the longest wait between attempts, in seconds (300).
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
        self._on_startup: list[Hook] = []
        self._on_shutdown: list[Hook] = []
        #: Set up by the startup hooks; every handler reads it as ``ctx.state``.
        self.state = State()

    @overload
    def job(self, handler: Callable[Concatenate[JobContext, P], R], /) -> JobHandle[P, R]: ...

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
        overlap: Overlap = "skip",
        concurrency: int | None = None,
        concurrency_key: str | None = None,
        rate_limit: str | None = None,
        rate_key: str | None = None,
        max_snoozes: int = DEFAULT_MAX_SNOOZES,
        unique: bool | tuple[str, ...] = False,
        unique_for: float | timedelta = DEFAULT_UNIQUE_FOR,
        debounce: float | timedelta | None = None,
        catchup_window: float | timedelta | None = None,
        catchup: Catchup = "latest",
        keep_result: float | timedelta = DEFAULT_KEEP,
    ) -> Callable[[Callable[Concatenate[JobContext, P], R]], JobHandle[P, R]]: ...

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
        overlap: Overlap = "skip",
        concurrency: int | None = None,
        concurrency_key: str | None = None,
        rate_limit: str | None = None,
        rate_key: str | None = None,
        max_snoozes: int = DEFAULT_MAX_SNOOZES,
        unique: bool | tuple[str, ...] = False,
        unique_for: float | timedelta = DEFAULT_UNIQUE_FOR,
        debounce: float | timedelta | None = None,
        catchup_window: float | timedelta | None = None,
        catchup: Catchup = "latest",
        keep_result: float | timedelta = DEFAULT_KEEP,
    ) -> JobHandle[Any, Any] | Callable[[Handler], JobHandle[Any, Any]]:
        """Register ``async def handler(ctx, **kwargs)`` as a job; a plain ``def`` handler
        runs in the worker's thread pool (``threads``), so it may block.

        Returns a :class:`~.handles.JobHandle`: called, it is the handler; its
        ``enqueue(broker, **kwargs)``, ``enqueue_in`` and ``enqueue_at`` enqueue the job
        with arguments a type checker matches against the handler's.

        Used bare (``@app.job``) or with arguments (``@app.job(every=60)``). Errors
        (a bad name, a job registered twice, an invalid cron expression or zone, a
        handler that cannot take ``ctx``) raise :class:`~.errors.JobDefinitionError`
        or :class:`~.errors.ScheduleError` at import time.

        :param name: the job's name (default: the function's ``__name__``).
        :param schedule: a cron expression (evaluated in ``tz``) or a
            :class:`~.schedules.Schedule`: the job is then ticked at every slot.
        :param tz: the IANA zone of a cron ``schedule`` (default UTC).
        :param every: an interval in seconds or a timedelta, instead of ``schedule``.
        :param max_attempts: overrides the App's default.
        :param timeout: overrides the App's default (seconds per attempt).
        :param backoff: overrides the App's default.
        :param max_backoff: overrides the App's default.
        :param overlap: what a slot does while the previous run of the schedule is still
            running on any replica: ``"skip"`` (settled as skipped, never retried),
            ``"buffer_one"`` (at most one waits, and starts when the running one ends)
            or ``"allow"`` (runs at once). Scheduled jobs only; needs a broker with leases.
        :param concurrency: at most this many runs of the job at once across every
            replica; the others wait, without using an attempt (needs leases).
        :param concurrency_key: the keyword argument whose value has a ``concurrency``
            limit of its own (``"tenant"``: at most N runs per tenant).
        :param rate_limit: at most this many starts in any period across every replica:
            ``"10/s"``, ``"600/m"``, ``"5/10s"`` (units s, m, h, d); a run over it waits,
            without using an attempt, until a start frees (needs leases).
        :param rate_key: the keyword argument whose value has a ``rate_limit`` of its
            own (``"tenant"``: that rate per tenant).
        :param unique: ``True`` (every kwarg) or a tuple of kwarg names: while a job of the
            same key waits or runs, enqueuing another through this handle returns that
            job's id instead of storing a second (needs leases).
        :param unique_for: seconds (or a timedelta) a unique job waiting in the queue
            holds its key at most (default an hour, at most a day); a running one holds
            it while it runs.
        :param debounce: seconds (or a timedelta) of quiet: the enqueues of the job
            through its handle collapse into one run, of the latest, which starts this
            long after it (needs memos and delayed jobs).
        :param max_snoozes: how many times a run may ``raise Snooze(seconds)`` (run again
            then, not counted as an attempt); one more counts as a failed attempt.
        :param catchup_window: seconds (or a timedelta): a slot that no replica could
            enqueue in time (every replica was down, the broker out of reach) is still
            enqueued, once, while it is at most this old (default: never; needs a broker
            with shared state).
        :param catchup: which missed slots of the window run late: ``"latest"`` (one run,
            and none when a slot is due anyway) or ``"all"`` (each, oldest first, at most
            :data:`~.scheduling.ticker.CATCHUP_LIMIT`).
        :param keep_result: seconds (or a timedelta) a finished run's status and return
            value are kept in the broker for ``job_status`` and ``wait_result`` (default
            an hour, at most seven days); 0 keeps nothing and writes nothing. Needs a
            broker with memos.
        """
        sched = to_schedule(schedule, tz=tz, interval=every)

        def register(fn: Handler) -> JobHandle[Any, Any]:
            job_name = name if name is not None else getattr(fn, "__name__", None)
            try:
                job_name = validate_job_name(job_name)
            except InvalidJobError as exc:
                raise JobDefinitionError(str(exc)) from None
            if job_name in self._jobs:
                raise JobDefinitionError(f"job {job_name!r} is registered twice")
            spec = self._jobs[job_name] = JobSpec(
                job_name,
                fn,
                sched,
                max_attempts=self._pick(max_attempts, "max_attempts"),
                timeout=timeout if timeout is not None else self._defaults["timeout"],
                backoff=self._pick(backoff, "backoff"),
                max_backoff=self._pick(max_backoff, "max_backoff"),
                overlap=overlap,
                concurrency=concurrency,
                concurrency_key=concurrency_key,
                rate_limit=rate_limit,
                rate_key=rate_key,
                max_snoozes=max_snoozes,
                unique=unique,
                unique_for=(
                    unique_for.total_seconds() if isinstance(unique_for, timedelta) else unique_for
                ),
                debounce=debounce.total_seconds() if isinstance(debounce, timedelta) else debounce,
                catchup_window=(
                    catchup_window.total_seconds()
                    if isinstance(catchup_window, timedelta)
                    else catchup_window
                ),
                catchup=catchup,
                keep_result=(
                    keep_result.total_seconds()
                    if isinstance(keep_result, timedelta)
                    else keep_result
                ),
            )
            return JobHandle(spec, fn)

        return register(handler) if handler is not None else register

    def on_startup(self, hook: Hook) -> Hook:
        """Register ``hook(state)`` (``async def`` or ``def``) to run when a worker starts,
        after schema sync and before any job or tick: put shared resources (a database
        pool, a client) on ``state``; handlers read them as ``ctx.state``. Hooks run in
        the order registered; one that raises stops the worker's start."""
        return self._add_hook(hook, self._on_startup, "on_startup")

    def on_shutdown(self, hook: Hook) -> Hook:
        """Register ``hook(state)`` to run when a worker stops, after its last job ended
        or was released; hooks run in reverse order, each even if another raised."""
        return self._add_hook(hook, self._on_shutdown, "on_shutdown")

    def _add_hook(self, hook: Hook, hooks: list[Hook], kind: str) -> Hook:
        if not callable(hook) or inspect.isasyncgenfunction(hook) or inspect.isclass(hook):
            raise JobDefinitionError(f"{kind} takes a function hook(state), got {hook!r}")
        hooks.append(hook)
        return hook

    async def startup(self) -> None:
        """Run the startup hooks in order (the worker calls this)."""
        for hook in self._on_startup:
            log.debug("startup hook %s", _name(hook))
            await _call(hook, self.state)

    async def shutdown(self) -> None:
        """Run the shutdown hooks in reverse order; each failure is logged, not raised."""
        for hook in reversed(self._on_shutdown):
            try:
                await _call(hook, self.state)
            except Exception:
                log.exception("shutdown hook %s failed", _name(hook))

    def _pick(self, value: Any, key: str) -> Any:
        return value if value is not None else self._defaults[key]

    @property
    def jobs(self) -> Mapping[str, JobSpec]:
        """Every registered job by name."""
        return MappingProxyType(self._jobs)

    def scheduled(self) -> Iterator[JobSpec]:
        """The jobs that have a schedule."""
        return (spec for spec in self._jobs.values() if spec.schedule is not None)


async def _call(hook: Hook, state: State) -> None:
    result = hook(state)
    if inspect.isawaitable(result):
        await result


def _name(hook: Hook) -> str:
    return str(getattr(hook, "__qualname__", hook))


def _provided_app() -> App:
    """The app of the one provider that recognises this environment."""
    found: list[tuple[str, App]] = []
    for ep in sorted(entry_points(group=APP_PROVIDERS), key=lambda e: e.name):
        try:
            app = ep.load()()
        except AppLoadError:
            raise
        except Exception as exc:
            raise AppLoadError(
                f"the {ep.name} app provider failed: {type(exc).__name__}: {exc}"
            ) from exc
        if app is not None:
            if not isinstance(app, App):
                raise AppLoadError(
                    f"the {ep.name} app provider gave a {type(app).__name__}, not an App"
                )
            found.append((ep.name, app))
    if len(found) > 1:
        names = ", ".join(name for name, _ in found)
        raise AppLoadError(f"no app given, and several providers found one ({names}): pass --app")
    if not found:
        raise AppLoadError("no app given: pass --app module[:attr] or set M_APP")
    return found[0][1]


def _app_frames(exc: BaseException) -> str:
    """The frames of ``exc``'s traceback outside the import machinery, framework-m and the
    standard library (the application's, and the packages it calls), as traceback lines."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _outside(f.filename)]
    return "".join(traceback.format_list(frames[-_APP_FRAMES:])).rstrip("\n")


_APP_FRAMES = 10
_OURS = os.path.dirname(os.path.abspath(__file__)) + os.sep
_STDLIB = tuple(
    {os.path.abspath(sysconfig.get_path(name)) + os.sep for name in ("stdlib", "platstdlib")}
)


def _outside(filename: str) -> bool:
    """Whether ``filename`` is neither framework-m's, the import machinery's nor the
    standard library's (packages installed under the standard library's folder count)."""
    if filename.startswith(("<frozen ", "<string>", _OURS)):
        return False
    packages = f"{os.sep}site-packages{os.sep}" in filename or "dist-packages" in filename
    return packages or not filename.startswith(_STDLIB)


#: The entry point group of app providers: each names a callable that returns the
#: :class:`App` of a project it recognises in this process's environment (the Django
#: project of ``DJANGO_SETTINGS_MODULE``, for ``framework_m_django``), or None.
APP_PROVIDERS = "framework_m.apps"


def load_app(target: str) -> App:
    """Import ``module[:attr]`` (``attr`` defaults to ``app``) and return the :class:`App`;
    without a target, the one app an installed provider (:data:`APP_PROVIDERS`) finds."""
    if not target:
        return _provided_app()
    module_name, _, attr = target.partition(":")
    attr = attr or "app"
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        where = _app_frames(exc)
        raise AppLoadError(
            f"cannot import app module {module_name!r}: {type(exc).__name__}: {exc}"
            + (f"\n{where}" if where else "")
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

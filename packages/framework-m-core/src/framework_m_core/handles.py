"""Job handles: what ``@app.job`` returns, to enqueue a job by its function, type-checked.

``await add.enqueue(broker, a=1, b=2)`` enqueues the job ``add`` with those kwargs;
a type checker reads the handler's parameters after its context (a ``ParamSpec``), so
``add.enqueue(broker, a=1, c=2)`` is an error before it runs, and at run time it raises
:class:`~.errors.InvalidJobError` naming the parameter before anything is sent.
Called directly, the handle is the handler itself (``await add(ctx, a=1, b=2)`` in a
unit test). Enqueueing by name (``broker.enqueue("add", a=1, b=2)``) works as before.
A handle's enqueue returns an :class:`EnqueuedJob`: the job id (a ``str``), with
``status()``, ``result(timeout=)`` and ``cancel()`` on the broker it went to.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from .control import jobs
from .control.debounce import enqueue_debounced
from .control.unique import enqueue_unique
from .errors import BrokerError, ConfigurationError, InvalidJobError
from .ports.base import BaseBroker
from .ports.capabilities import Capability
from .ports.messages import JobMessage, delay_seconds, due_time, new_message
from .ports.protocols import BrokerProtocol, JobWriterProtocol, SyncJobWriterProtocol
from .ports.statuses import JobStatus

if TYPE_CHECKING:
    from .blocking.client import SyncClient, SyncJob
    from .control.schedules import ScheduleHandle
    from .jobs import JobContext, JobSpec
    from .ports.protocols import JobQueueProtocol

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class EnqueueOptions:
    """How a handle enqueues: with a deduplication id, and held until a time or for a delay."""

    deduplication_id: str | None = None
    delay: timedelta | float | None = None  # seconds, or a timedelta
    at: datetime | float | None = None  # an aware datetime, or unix seconds


class EnqueuedJob(str):
    """A job id as a handle's enqueue returns it: the ``str`` itself, and what to ask
    about the job on the broker it was enqueued on."""

    broker: JobQueueProtocol

    def __new__(cls, job_id: str, broker: JobQueueProtocol) -> EnqueuedJob:
        job = super().__new__(cls, job_id)
        job.broker = broker
        return job

    async def status(self) -> JobStatus:
        """The job's status (:func:`~framework_m_core.job_status`)."""
        return await jobs.job_status(self._kept(), str(self))

    async def result(self, *, timeout: float) -> Any:
        """The job's return value, waiting up to ``timeout`` seconds
        (:func:`~framework_m_core.wait_result`)."""
        return await jobs.wait_result(self._kept(), str(self), timeout=timeout)

    async def cancel(self) -> bool:
        """Cancel the job (:func:`~framework_m_core.cancel_job`)."""
        return await jobs.cancel_job(self._kept(), str(self))

    def _kept(self) -> BrokerProtocol:
        if not isinstance(self.broker, BrokerProtocol):
            raise BrokerError(
                f"{self.broker!r} is not a broker: it keeps no job statuses; ask the broker "
                f"the job goes to (job_status(broker, job_id))"
            )
        return self.broker


class JobHandle(Generic[P, R]):
    """A registered job, enqueued by its function: ``await send.enqueue(broker, to=...)``.

    Keeps running as the plain handler when called. The enqueue methods take the
    broker first, then the handler's own arguments (positional ones are passed by their
    names); they are checked against the handler's signature before anything is sent.
    """

    def __init__(
        self,
        spec: JobSpec,
        handler: Callable[Concatenate[JobContext, P], R],
        options: EnqueueOptions = EnqueueOptions(),
    ) -> None:
        self.spec = spec
        self._handler = handler
        self._options = options
        functools.update_wrapper(self, handler)

    @property
    def name(self) -> str:
        """The job's name, the one it is enqueued under."""
        return self.spec.name

    def __call__(self, ctx: JobContext, /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the handler itself (what a unit test does); nothing is enqueued."""
        return self._handler(ctx, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<job {self.spec.name!r}>"

    def schedule(self, broker: BrokerProtocol) -> ScheduleHandle:
        """This scheduled job's schedule on ``broker``'s fleet: pause, resume, trigger,
        backfill, describe (:class:`~framework_m_core.control.schedules.ScheduleHandle`)."""
        from .control.schedules import ScheduleHandle

        if self.spec.schedule is None:
            raise ConfigurationError(f"job {self.spec.name!r} has no schedule")
        return ScheduleHandle(broker, self.spec.name, self.spec)

    def with_options(
        self,
        *,
        deduplication_id: str | None = None,
        delay: timedelta | float | None = None,
        at: datetime | float | None = None,
    ) -> JobHandle[P, R]:
        """This handle with a deduplication id, or held for ``delay`` seconds or until
        ``at`` (not both), for the enqueues made through it."""
        if delay is not None and at is not None:
            raise InvalidJobError(f"job {self.spec.name!r}: give delay or at, not both")
        return JobHandle(self.spec, self._handler, EnqueueOptions(deduplication_id, delay, at))

    async def enqueue(
        self, broker: JobQueueProtocol, /, *args: P.args, **kwargs: P.kwargs
    ) -> EnqueuedJob:
        """Enqueue this job on ``broker`` with these arguments; return its job id.

        As :meth:`~.protocols.JobQueueProtocol.enqueue`, after the arguments are checked
        against the handler (:class:`~.errors.InvalidJobError` names what does not fit).
        """
        return EnqueuedJob(await self._send(broker, self._kwargs(args, kwargs)), broker)

    async def _send(self, broker: JobQueueProtocol, job_kwargs: dict[str, Any]) -> str:
        o = self._options
        if self.spec.unique is not False or self.spec.debounce is not None:
            return await self._kept(broker, job_kwargs)
        if isinstance(broker, JobWriterProtocol):
            return await broker.write_job(self._message(job_kwargs))
        if isinstance(broker, BaseBroker):  # the message carries how long its status lasts
            at = o.at
            if at is None and o.delay is not None:
                at = time.time() + delay_seconds(o.delay)
            return await broker.enqueue_job(
                self.spec.name,
                o.deduplication_id,
                job_kwargs,
                at=at,
                keep=self.spec.keep_result,
            )
        if o.at is not None:
            return await broker.enqueue_at(o.at, self.spec.name, o.deduplication_id, **job_kwargs)
        if o.delay is not None:
            return await broker.enqueue_in(
                o.delay, self.spec.name, o.deduplication_id, **job_kwargs
            )
        return await broker.enqueue(self.spec.name, o.deduplication_id, **job_kwargs)

    async def enqueue_in(
        self,
        broker: JobQueueProtocol,
        delay: timedelta | float,
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> EnqueuedJob:
        """Enqueue this job to run ``delay`` (seconds or a timedelta) from now."""
        held = self.with_options(deduplication_id=self._options.deduplication_id, delay=delay)
        return await held.enqueue(broker, *args, **kwargs)

    async def enqueue_at(
        self,
        broker: JobQueueProtocol,
        when: datetime | float,
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> EnqueuedJob:
        """Enqueue this job to run no sooner than ``when`` (an aware datetime or unix
        seconds)."""
        held = self.with_options(deduplication_id=self._options.deduplication_id, at=when)
        return await held.enqueue(broker, *args, **kwargs)

    # -- from blocking code ---------------------------------------------------------------

    async def _kept(self, broker: JobQueueProtocol, job_kwargs: dict[str, Any]) -> str:
        """Enqueue a unique or debounced job, which the broker's store keeps track of:
        the id of the job stored, or of the unique one of its key."""
        what = "unique" if self.spec.unique is not False else "debounced"
        if not isinstance(broker, BaseBroker) or Capability.STORE not in broker.capabilities:
            raise ConfigurationError(
                f"job {self.spec.name!r} is {what}: it is enqueued on a broker with a store, "
                f"not on {type(broker).__name__}"
            )
        message = self._message(job_kwargs)
        if what == "unique":
            return await enqueue_unique(broker, self.spec, message)
        if Capability.DELAYED_ENQUEUE not in broker.capabilities:
            raise ConfigurationError(
                f"job {self.spec.name!r} is debounced: {broker.display_url} cannot hold a job "
                "until it is due"
            )
        return await enqueue_debounced(broker, self.spec, message)

    def _message(self, job_kwargs: dict[str, Any]) -> JobMessage:
        """The job as a writer (the outbox) stores it: checked, due time and keep set."""
        o = self._options
        at = o.at
        if at is None and o.delay is not None:
            at = time.time() + delay_seconds(o.delay)
        due = None if at is None else due_time(at)
        return new_message(
            self.spec.name,
            o.deduplication_id,
            job_kwargs,
            not_before=due,
            keep=self.spec.keep_result,
        )

    @overload
    def enqueue_sync(self, client: SyncClient, /, *args: P.args, **kwargs: P.kwargs) -> SyncJob: ...

    @overload
    def enqueue_sync(
        self, client: SyncJobWriterProtocol, /, *args: P.args, **kwargs: P.kwargs
    ) -> str: ...

    def enqueue_sync(
        self, client: SyncClient | SyncJobWriterProtocol, /, *args: P.args, **kwargs: P.kwargs
    ) -> SyncJob | str:
        """:meth:`enqueue` from plain ``def`` code, through a
        :func:`~framework_m_core.connect_sync` client: the arguments are checked in the
        calling thread, then this blocks until the broker stored the job. Given a
        writer (``Outbox(session)``), the job is written there, in its transaction."""
        job_kwargs = self._kwargs(args, kwargs)
        if isinstance(client, SyncJobWriterProtocol):
            return client.write_job_sync(self._message(job_kwargs))
        return client.job(client.run(lambda b: self._send(b, job_kwargs), f"enqueue {self.name}"))

    @overload
    def enqueue_in_sync(
        self, client: SyncClient, delay: timedelta | float, /, *args: P.args, **kwargs: P.kwargs
    ) -> SyncJob: ...

    @overload
    def enqueue_in_sync(
        self,
        client: SyncJobWriterProtocol,
        delay: timedelta | float,
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> str: ...

    def enqueue_in_sync(
        self,
        client: SyncClient | SyncJobWriterProtocol,
        delay: timedelta | float,
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> SyncJob | str:
        """:meth:`enqueue_in` from plain ``def`` code (see :meth:`enqueue_sync`)."""
        held = self.with_options(deduplication_id=self._options.deduplication_id, delay=delay)
        return held.enqueue_sync(client, *args, **kwargs)

    @overload
    def enqueue_at_sync(
        self, client: SyncClient, when: datetime | float, /, *args: P.args, **kwargs: P.kwargs
    ) -> SyncJob: ...

    @overload
    def enqueue_at_sync(
        self,
        client: SyncJobWriterProtocol,
        when: datetime | float,
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> str: ...

    def enqueue_at_sync(
        self,
        client: SyncClient | SyncJobWriterProtocol,
        when: datetime | float,
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> SyncJob | str:
        """:meth:`enqueue_at` from plain ``def`` code (see :meth:`enqueue_sync`)."""
        held = self.with_options(deduplication_id=self._options.deduplication_id, at=when)
        return held.enqueue_sync(client, *args, **kwargs)

    def _kwargs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The job's kwargs: positional arguments by their parameters' names, all checked
        against the handler's signature."""
        if args:
            params = list(self.spec.signature.parameters.values())[1:]  # after ctx
            names = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
            if len(args) > len(names):
                raise InvalidJobError(
                    f"job {self.spec.name!r} takes {len(names)} positional argument(s) "
                    f"after ctx, got {len(args)}; pass the arguments by name"
                )
            given = dict(zip(names, args, strict=False))
            if twice := sorted(given.keys() & kwargs.keys()):
                raise InvalidJobError(f"job {self.spec.name!r}: {twice[0]!r} given twice")
            kwargs = {**given, **kwargs}
        problem = self.spec.kwargs_problem(kwargs)
        if problem is not None:
            raise InvalidJobError(f"job {self.spec.name!r}: {problem}")
        return kwargs

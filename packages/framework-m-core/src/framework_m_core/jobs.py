"""Job definitions and the context a handler receives."""

from __future__ import annotations

import inspect
import logging
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Literal, get_args

from .errors import JobDefinitionError
from .ports.messages import MAX_KEEP
from .rates import Rate, parse_rate
from .scheduling.schedules import Schedule

if TYPE_CHECKING:
    from .ports.protocols import JobQueueProtocol

#: What a slot does while the previous run of its schedule is still running anywhere.
Overlap = Literal["skip", "buffer_one", "allow"]
OVERLAP_POLICIES: tuple[str, ...] = get_args(Overlap)
#: Which slots missed while no replica could enqueue them a ticker enqueues late.
Catchup = Literal["latest", "all"]
CATCHUP_POLICIES: tuple[str, ...] = get_args(Catchup)
MAX_CONCURRENCY = 1000
#: The most snoozes a job may be given (``max_snoozes=``), and the longest one.
MAX_SNOOZES = 10_000
MAX_SNOOZE = 86_400.0
DEFAULT_MAX_SNOOZES = 20
#: Seconds a unique job waiting in the queue holds its key at most (``unique_for=``).
DEFAULT_UNIQUE_FOR = 3600.0
MAX_UNIQUE_FOR = 86_400.0
#: The shortest and the longest quiet time of ``debounce=``.
MIN_DEBOUNCE = 0.01
MAX_DEBOUNCE = 86_400.0
MAX_CATCHUP_WINDOW = 366 * 86400.0
#: Seconds a finished run's status and result are kept unless the job says otherwise.
DEFAULT_KEEP = 3600.0

# ``async def handler(ctx, **kwargs)``, or a plain ``def`` run in the worker's thread pool.
Handler = Callable[..., Any]


class Snooze(Exception):
    """Raised by a handler: run the job again in ``seconds`` (or a timedelta), not
    counted as an attempt (an API answered 429: ``raise Snooze(retry_after)``).

    The job's delivery is settled and a copy with the same id is stored, due then;
    its status reads ``scheduled`` meanwhile. A job snoozes at most its
    ``max_snoozes`` times (20 by default); one more counts as a failed attempt.
    """

    def __init__(self, seconds: float | timedelta) -> None:
        value = seconds.total_seconds() if isinstance(seconds, timedelta) else seconds
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not (math.isfinite(value) and 0 <= value <= MAX_SNOOZE)
        ):
            raise ValueError(
                f"a snooze lasts 0 to {MAX_SNOOZE:g} seconds (or a timedelta), got {seconds!r}"
            )
        super().__init__(f"snoozed for {value:g}s")
        self.seconds = float(value)


class State(SimpleNamespace):
    """What an app's startup hooks set up for its handlers (``ctx.state.db``...)."""


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a running handler knows about its job. Passed as the first argument."""

    job_id: str
    job_name: str
    attempt: int  # 1 for the first delivery
    max_attempts: int
    scheduled_at: datetime | None  # the slot (aware, UTC) for ticked jobs, else None
    enqueued_at: datetime
    deduplication_id: str | None
    broker: JobQueueProtocol  # to enqueue follow-up jobs: ``await ctx.broker.enqueue(...)``
    # Its records carry job, job_id, attempt and (ticked jobs) slot (see observability.logs).
    log: logging.LoggerAdapter[logging.Logger]
    state: State = field(default_factory=State)  # the app's, as its startup hooks left it
    cancel_flag: Callable[[], bool] = field(default=lambda: False, repr=False)

    @property
    def cancelled(self) -> bool:
        """Whether the job was cancelled while it runs (``cancel()``): a ``def`` handler
        checks it and returns early; an ``async def`` one is cancelled anyway."""
        return self.cancel_flag()


@dataclass(frozen=True, slots=True)
class _KwargsRule:
    """The kwargs ``signature.bind(ctx, **kwargs)`` accepts, as sets (a check per delivery
    without building a BoundArguments); only for signatures it describes exactly."""

    required: frozenset[str]
    allowed: frozenset[str] | None  # None: a ``**kwargs`` parameter takes any other name
    ctx: str | None  # the first parameter's name when a keyword can also fill it

    @classmethod
    def of(cls, signature: inspect.Signature) -> _KwargsRule | None:
        P = inspect.Parameter
        params = list(signature.parameters.values())
        if not params or params[0].kind not in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD):
            return None  # nothing takes ctx: bind says why
        first, rest = params[0], params[1:]
        if any(p.kind is P.POSITIONAL_ONLY for p in rest):
            return None
        named = [p for p in rest if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)]
        return cls(
            required=frozenset(p.name for p in named if p.default is P.empty),
            allowed=(
                None
                if any(p.kind is P.VAR_KEYWORD for p in rest)
                else frozenset(p.name for p in named)
            ),
            ctx=first.name if first.kind is P.POSITIONAL_OR_KEYWORD else None,
        )

    def accepts(self, kwargs: Mapping[str, object]) -> bool:
        keys = kwargs.keys()
        return (
            keys >= self.required
            and (self.allowed is None or keys <= self.allowed)
            and (self.ctx is None or self.ctx not in kwargs)
        )


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A registered job: its handler, schedule and limits."""

    name: str
    handler: Handler
    schedule: Schedule | None = None
    max_attempts: int = 3
    timeout: float | None = 300.0  # seconds per attempt; None means no limit
    backoff: float = 1.0  # delay before the 2nd attempt; doubles each attempt
    max_backoff: float = 300.0
    overlap: Overlap = "skip"  # scheduled jobs only
    concurrency: int | None = None  # runs at once across every replica; None: no limit
    concurrency_key: str | None = None  # the kwarg whose every value has that limit
    rate_limit: str | None = None  # starts per period across every replica ("10/s")
    rate_key: str | None = None  # the kwarg whose every value has that rate
    max_snoozes: int = DEFAULT_MAX_SNOOZES  # ``Snooze`` s a job may be given
    # One job per key (all kwargs, or the named ones) while one waits or runs.
    unique: bool | tuple[str, ...] = False
    unique_for: float = DEFAULT_UNIQUE_FOR  # seconds a waiting job holds its key at most
    debounce: float | None = None  # seconds of quiet after which the latest enqueue runs
    catchup_window: float | None = None  # seconds; None: a missed slot is never enqueued late
    catchup: Catchup = "latest"
    keep_result: float = DEFAULT_KEEP  # seconds a finished run's status and result are kept
    # Read once here: every delivery's kwargs are checked against the handler's signature.
    signature: inspect.Signature = field(init=False, repr=False, compare=False)
    blocking: bool = field(init=False, repr=False, compare=False)  # a plain ``def`` handler
    rate: Rate | None = field(init=False, repr=False, compare=False)  # ``rate_limit`` read
    _kwargs: _KwargsRule | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        handler = self.handler
        if (
            not callable(handler)
            or inspect.isasyncgenfunction(handler)
            or inspect.isgeneratorfunction(handler)
            or inspect.isclass(handler)
        ):
            raise JobDefinitionError(
                f"job {self.name!r}: handler must be an 'async def' or 'def' function "
                "taking (ctx, **kwargs)"
            )
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise JobDefinitionError(f"job {self.name!r}: max_attempts must be an integer")
        if self.max_attempts < 1:
            raise JobDefinitionError(f"job {self.name!r}: max_attempts must be >= 1")
        if self.timeout is not None and not (math.isfinite(self.timeout) and self.timeout > 0):
            raise JobDefinitionError(f"job {self.name!r}: timeout must be > 0 seconds or None")
        for label, value in (("backoff", self.backoff), ("max_backoff", self.max_backoff)):
            if not (math.isfinite(value) and value >= 0):
                raise JobDefinitionError(f"job {self.name!r}: {label} must be >= 0 seconds")
        try:
            signature = inspect.signature(handler)
        except (TypeError, ValueError) as exc:
            raise JobDefinitionError(
                f"job {self.name!r}: handler has no signature: {exc}"
            ) from None
        self._check_limits(signature)
        object.__setattr__(self, "signature", signature)
        object.__setattr__(self, "blocking", not inspect.iscoroutinefunction(handler))
        object.__setattr__(self, "_kwargs", _KwargsRule.of(signature))

    def _check_limits(self, signature: inspect.Signature) -> None:
        if self.overlap not in OVERLAP_POLICIES:
            raise JobDefinitionError(
                f"job {self.name!r}: overlap must be one of {', '.join(OVERLAP_POLICIES)}, "
                f"got {self.overlap!r}"
            )
        self._check_catchup()
        keep = self.keep_result
        if (
            isinstance(keep, bool)
            or not isinstance(keep, int | float)
            or not (math.isfinite(keep) and 0 <= keep <= MAX_KEEP)
        ):
            raise JobDefinitionError(
                f"job {self.name!r}: keep_result must be 0 (keep nothing) to {MAX_KEEP:g} "
                f"seconds; got {keep!r}"
            )
        self._check_snoozes()
        self._check_unique(signature)
        self._check_debounce()
        n = self.concurrency
        if n is not None and (
            isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CONCURRENCY
        ):
            raise JobDefinitionError(
                f"job {self.name!r}: concurrency must be an integer from 1 to "
                f"{MAX_CONCURRENCY}, or None; got {n!r}"
            )
        if self.concurrency_key is not None:
            if n is None:
                raise JobDefinitionError(f"job {self.name!r}: concurrency_key needs concurrency=N")
            self._check_kwarg("concurrency_key", self.concurrency_key, signature)
        self._check_rate(signature)

    def _check_rate(self, signature: inspect.Signature) -> None:
        rate = None
        if self.rate_limit is not None:
            try:
                rate = parse_rate(self.rate_limit)
            except ValueError as exc:
                raise JobDefinitionError(f"job {self.name!r}: rate_limit: {exc}") from None
        object.__setattr__(self, "rate", rate)
        if self.rate_key is not None:
            if rate is None:
                raise JobDefinitionError(f"job {self.name!r}: rate_key needs rate_limit=")
            self._check_kwarg("rate_key", self.rate_key, signature)

    def _check_snoozes(self) -> None:
        snoozes = self.max_snoozes
        if (
            isinstance(snoozes, bool)
            or not isinstance(snoozes, int)
            or not 0 <= snoozes <= MAX_SNOOZES
        ):
            raise JobDefinitionError(
                f"job {self.name!r}: max_snoozes must be an integer from 0 to {MAX_SNOOZES}, "
                f"got {snoozes!r}"
            )

    def _check_unique(self, signature: inspect.Signature) -> None:
        unique, within = self.unique, self.unique_for
        if isinstance(unique, tuple) and unique:
            for name in unique:
                self._check_kwarg("unique", name, signature)
        elif not isinstance(unique, bool):
            raise JobDefinitionError(
                f"job {self.name!r}: unique must be True (every kwarg), False, or a tuple of "
                f"kwarg names; got {unique!r}"
            )
        if (
            isinstance(within, bool)
            or not isinstance(within, int | float)
            or not (math.isfinite(within) and 1 <= within <= MAX_UNIQUE_FOR)
        ):
            raise JobDefinitionError(
                f"job {self.name!r}: unique_for must be 1 to {MAX_UNIQUE_FOR:g} seconds, "
                f"got {within!r}"
            )

    def _check_debounce(self) -> None:
        quiet = self.debounce
        if quiet is None:
            return
        if (
            isinstance(quiet, bool)
            or not isinstance(quiet, int | float)
            or not (math.isfinite(quiet) and MIN_DEBOUNCE <= quiet <= MAX_DEBOUNCE)
        ):
            raise JobDefinitionError(
                f"job {self.name!r}: debounce must be {MIN_DEBOUNCE:g} to {MAX_DEBOUNCE:g} "
                f"seconds, or None; got {quiet!r}"
            )
        if self.unique is not False:
            raise JobDefinitionError(
                f"job {self.name!r}: debounce and unique do not combine (debounce keeps one "
                "run of the latest enqueue already)"
            )

    @property
    def unique_fields(self) -> tuple[str, ...] | None:
        """The kwargs whose values make a unique job's key (None: every kwarg)."""
        return self.unique if isinstance(self.unique, tuple) else None

    def _check_kwarg(self, option: str, key: object, signature: inspect.Signature) -> None:
        """Refuse ``key`` as the name of a keyword argument (``option``) the handler
        does not take."""
        params = list(signature.parameters.values())[1:]
        takes = any(p.name == key and p.kind is not p.VAR_POSITIONAL for p in params) or any(
            p.kind is p.VAR_KEYWORD for p in params
        )
        if not isinstance(key, str) or not takes:
            raise JobDefinitionError(
                f"job {self.name!r}: {option} {key!r} is not a keyword argument of the handler"
            )

    def _check_catchup(self) -> None:
        window = self.catchup_window
        if window is None:
            return
        if self.schedule is None:
            raise JobDefinitionError(
                f"job {self.name!r}: catchup_window is for scheduled jobs (give schedule= "
                "or every=)"
            )
        if (
            isinstance(window, bool)
            or not isinstance(window, int | float)
            or not (math.isfinite(window) and 0 < window <= MAX_CATCHUP_WINDOW)
        ):
            raise JobDefinitionError(
                f"job {self.name!r}: catchup_window must be > 0 and at most "
                f"{MAX_CATCHUP_WINDOW:g} seconds, or None; got {window!r}"
            )
        if self.catchup not in CATCHUP_POLICIES:
            raise JobDefinitionError(
                f"job {self.name!r}: catchup must be one of {', '.join(CATCHUP_POLICIES)}, "
                f"got {self.catchup!r}"
            )

    @property
    def leased(self) -> bool:
        """Whether runs of this job take leases (an overlap policy, a limit, a rate or a
        unique key)."""
        return (
            self.concurrency is not None
            or self.rate_limit is not None
            or self.unique is not False
            or (self.schedule is not None and self.overlap != "allow")
        )

    def kwargs_problem(self, kwargs: Mapping[str, object]) -> str | None:
        """Why the handler cannot be called as ``handler(ctx, **kwargs)``; None if it can."""
        rule = self._kwargs
        if rule is not None and rule.accepts(kwargs):
            return None
        try:
            self.signature.bind(None, **kwargs)
        except TypeError as exc:
            return str(exc)
        return None

    def retry_delay(self, attempt: int) -> float:
        """Delay before the attempt after ``attempt``: exponential, capped, +-10% jitter."""
        base = min(self.max_backoff, self.backoff * 2.0 ** min(attempt - 1, 60))
        return base * random.uniform(0.9, 1.1)

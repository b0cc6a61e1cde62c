"""Job definitions and the context a handler receives."""

from __future__ import annotations

import inspect
import logging
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from .errors import JobDefinitionError
from .schedules import Schedule

if TYPE_CHECKING:
    from .protocols import JobQueueProtocol

# ``async def handler(ctx, **kwargs)``, or a plain ``def`` run in the worker's thread pool.
Handler = Callable[..., Any]


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
    queue: JobQueueProtocol  # to enqueue follow-up jobs
    # Its records carry job, job_id, attempt and (ticked jobs) slot: see framework_m_core.logs.
    log: logging.LoggerAdapter[logging.Logger]
    state: State = field(default_factory=State)  # the app's, as its startup hooks left it


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
    # Read once here: every delivery's kwargs are checked against the handler's signature.
    signature: inspect.Signature = field(init=False, repr=False, compare=False)
    blocking: bool = field(init=False, repr=False, compare=False)  # a plain ``def`` handler

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
        object.__setattr__(self, "signature", signature)
        object.__setattr__(self, "blocking", not inspect.iscoroutinefunction(handler))

    def retry_delay(self, attempt: int) -> float:
        """Delay before the attempt after ``attempt``: exponential, capped, +-10% jitter."""
        base = min(self.max_backoff, self.backoff * 2.0 ** min(attempt - 1, 60))
        return base * random.uniform(0.9, 1.1)

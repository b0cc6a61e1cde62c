"""Schedule handles: one schedule of the fleet, steered and described in one place.

``report.schedule(broker)`` (a job handle of a scheduled job) or
``ScheduleHandle(broker, "@nightly")`` (a runtime schedule, by its id) gives a handle
whose calls reach every replica through the broker's shared state: ``pause``,
``resume``, ``trigger``, ``backfill`` and ``describe``. They are the calls
``m schedules`` and the console make, with the same checks and errors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..errors import ConfigurationError, InvalidJobError
from ..handles import EnqueuedJob
from ..jobs import JobSpec
from ..ports.capabilities import Capability
from ..ports.protocols import BrokerProtocol
from . import keys, steering
from .shared import shared


@dataclass(frozen=True, slots=True)
class ScheduleDescription:
    """What the fleet knows of a schedule now: its state (pause, latest slot, last
    trigger) and the runs of it going on (``job id@host:pid``, under its overlap lease)."""

    name: str
    state: steering.ScheduleState
    running: Sequence[str]


class ScheduleHandle:
    """One schedule on ``broker``'s fleet: a code schedule by its job's name, or a
    runtime schedule as ``@{id}``. ``spec`` is the code schedule's job (its schedule for
    :meth:`backfill`, its handler to check a trigger's kwargs); a runtime schedule's is
    read from the broker."""

    def __init__(self, broker: BrokerProtocol, name: str, spec: JobSpec | None = None):
        self.broker = broker
        self.name = steering.check_name(name)
        self._spec = spec

    def __repr__(self) -> str:
        return f"<schedule {self.name!r} on {self.broker.display_url}>"

    def _steerable(self) -> BrokerProtocol:
        if Capability.STORE not in self.broker.capabilities:
            raise ConfigurationError(
                f"{self.broker.display_url} keeps no shared state: schedules cannot be "
                "steered there"
            )
        return self.broker

    async def describe(self) -> ScheduleDescription:
        """The schedule's state and its runs going on now."""
        state = await steering.read(self._steerable(), self.name)
        running: list[str] = []
        if Capability.STORE in self.broker.capabilities:
            running = sorted(await shared(self.broker).lease_holders(keys.overlap(self.name)))
        return ScheduleDescription(self.name, state, running)

    async def pause(
        self, *, until: datetime | float | None = None, reason: str | None = None
    ) -> steering.ScheduleState:
        """Enqueue none of its slots, on every replica from its next tick, until
        :meth:`resume` or ``until`` (an aware datetime, or unix seconds)."""
        return await steering.pause(
            self._steerable(),
            self.name,
            until=None if until is None else _unix(until),
            reason=reason,
        )

    async def resume(self) -> steering.ScheduleState:
        """Enqueue its slots again from the next tick; those the pause held back are
        never caught up."""
        return await steering.resume(self._steerable(), self.name)

    async def trigger(self, **kwargs: Any) -> EnqueuedJob:
        """Enqueue one run now, whatever the pause; its job id. A runtime schedule's run
        takes the schedule's kwargs updated by ``kwargs``."""
        broker = self._steerable()
        if self._spec is not None and (problem := self._spec.kwargs_problem(kwargs)):
            raise InvalidJobError(f"job {self.name!r}: {problem}")
        return EnqueuedJob(await steering.trigger(broker, self.name, kwargs), broker)

    async def backfill(self, start: datetime | float, end: datetime | float) -> steering.Backfilled:
        """Enqueue each of its slots from ``start`` to ``end`` (both in the past), once:
        a slot enqueued before is a duplicate, not a second run."""
        begin, finish = _unix(start), _unix(end)
        schedule = None if self._spec is None else self._spec.schedule
        return await steering.backfill(self._steerable(), self.name, schedule, begin, finish)


def _unix(when: datetime | float) -> float:
    """``when`` in unix seconds; an aware datetime, or a finite number."""
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise ConfigurationError(f"give the time's zone: {when.isoformat()}")
        return when.timestamp()
    if isinstance(when, bool) or not isinstance(when, int | float) or not math.isfinite(when):
        raise ConfigurationError(f"a time is an aware datetime or unix seconds, got {when!r}")
    return float(when)

"""What operators change about a schedule at runtime, kept in the broker's shared state.

One state record per scheduled job, under ``schedule:{job}``: whether it is paused
(until when, why, since when), the latest slot known enqueued (it only moves
forward) and the last trigger. Every change reads the record and writes it back by
compare-and-set (:meth:`~framework_m_core.control.shared.Shared.write_state`), so
replicas and operators changing one schedule at once never undo each other.

A record read from the broker is validated like any other input: a field that is
not what this module writes is ignored with a warning, never trusted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from ..errors import BrokerError, ConfigurationError, NotFoundError
from ..ports.messages import (
    JobMessage,
    tick_deduplication_id,
    trigger_deduplication_id,
    validate_job_name,
)
from ..ports.protocols import BrokerProtocol
from ..runtime.events import retrieved
from ..scheduling.schedules import Schedule
from . import fleet, keys, runtime_schedules
from .runtime_schedules import contention_pause
from .shared import shared

log = logging.getLogger("framework_m.schedules")

MAX_REASON = 200
#: A record whose version moves on each pause and resume: tickers read it once a tick
#: and read the schedules' own records again only when it moved.
_ROUNDS = 50  # compare-and-set rounds before a change gives up


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """A schedule's runtime state; the default is "running, nothing known"."""

    paused: bool = False
    paused_until: float | None = None  # unix seconds; None: until resumed
    paused_at: float | None = None
    reason: str | None = None
    latest_slot: int | None = None  # the latest slot known enqueued
    triggered_at: float | None = None  # the last trigger
    resumed_at: float | None = None  # the last resume: no slot before it is caught up
    paused_by: str | None = None  # who paused it: "user@host (m schedules)", "console ..."

    def pauses(self, slot: float) -> bool:
        """Whether a slot at ``slot`` (unix seconds) is held back by the pause."""
        return self.paused and (self.paused_until is None or slot < self.paused_until)

    def encode(self) -> bytes:
        fields: dict[str, object] = {"version": 1, "paused": self.paused}
        optional = {
            "paused_until": self.paused_until,
            "paused_at": self.paused_at,
            "reason": self.reason,
            "latest_slot": self.latest_slot,
            "triggered_at": self.triggered_at,
            "resumed_at": self.resumed_at,
            "paused_by": self.paused_by,
        }
        fields.update({k: v for k, v in optional.items() if v is not None})
        return json.dumps(fields, separators=(",", ":")).encode()


def decode_state(value: bytes, job_name: str = "?") -> ScheduleState:
    """The state in ``value``; what is malformed is left at its default, with a warning."""
    try:
        raw = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        log.warning("%s: the stored schedule state is not JSON; using the default", job_name)
        return ScheduleState()
    if not isinstance(raw, dict):
        log.warning("%s: the stored schedule state is not an object; using the default", job_name)
        return ScheduleState()
    out: dict[str, Any] = {}
    bad: list[str] = []

    def take(name: str, ok: Callable[[object], bool]) -> None:
        if name in raw:
            if ok(raw[name]):
                out[name] = raw[name]
            else:
                bad.append(name)

    take("paused", lambda v: isinstance(v, bool))
    take("paused_until", _is_time)
    take("paused_at", _is_time)
    take("reason", lambda v: isinstance(v, str) and len(v) <= MAX_REASON and v.isprintable())
    take("latest_slot", lambda v: isinstance(v, int) and not isinstance(v, bool) and _is_time(v))
    take("triggered_at", _is_time)
    take("resumed_at", _is_time)
    take("paused_by", lambda v: isinstance(v, str) and len(v) <= MAX_REASON and v.isprintable())
    if bad:
        log.warning("%s: ignoring malformed schedule state fields: %s", job_name, ", ".join(bad))
    return ScheduleState(**out)


def _is_time(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value < 1e11
    )


async def read(broker: BrokerProtocol, job_name: str) -> ScheduleState:
    """The schedule's state as the broker holds it now (the default when none is kept)."""
    entry = await shared(broker).read_state(keys.schedule(job_name))
    return ScheduleState() if entry is None else decode_state(entry.value, job_name)


async def change(
    broker: BrokerProtocol, job_name: str, step: Callable[[ScheduleState], ScheduleState | None]
) -> ScheduleState:
    """Apply ``step`` (None: nothing to write) by compare-and-set until it lands; return
    the state as written (or as found, when nothing was to be written)."""
    key = keys.schedule(job_name)
    for attempt in range(_ROUNDS):
        await contention_pause(attempt)
        entry = await shared(broker).read_state(key)
        state = ScheduleState() if entry is None else decode_state(entry.value, job_name)
        new = step(state)
        if new is None or (new == state and entry is not None):
            return state
        version = None if entry is None else entry.version
        if await shared(broker).write_state(key, new.encode(), version=version) is not None:
            return new
    raise BrokerError(f"the state of schedule {job_name!r} kept changing; try again")


async def _steered(broker: BrokerProtocol) -> None:
    """Move the steering record's version (after a pause or resume was written)."""
    for attempt in range(_ROUNDS):
        await contention_pause(attempt)
        entry = await shared(broker).read_state(keys.STEERING)
        version = None if entry is None else entry.version
        if await shared(broker).write_state(keys.STEERING, b"{}", version=version) is not None:
            return
    raise BrokerError("the schedules' steering record kept changing; try again")


async def steering_version(broker: BrokerProtocol) -> int | None:
    """The steering record's version now (None: nothing was ever paused or resumed)."""
    entry = await shared(broker).read_state(keys.STEERING)
    return None if entry is None else entry.version


#: Seconds a schedule's state, once read, is used while nothing is steered.
STATE_KEPT = 60.0


class SteeringView:
    """The schedules' states as a ticker sees them: each read once and used until the
    steering record moves (read at most once per tick) or :data:`STATE_KEPT` passed, so
    a tick of many schedules costs one read while nobody pauses or resumes."""

    def __init__(self, broker: BrokerProtocol) -> None:
        self._broker = broker
        self._states: dict[str, tuple[ScheduleState, float]] = {}
        self._version: int | None = None  # of the steering record, as last read
        self._reading: tuple[int, asyncio.Future[None]] | None = None  # tick, read

    async def state(self, job_name: str, tick: int) -> ScheduleState:
        """``job_name``'s state at tick number ``tick`` (the ticker counts its ticks)."""
        if self._reading is None or self._reading[0] != tick:
            reading = asyncio.ensure_future(self._read_steering())
            reading.add_done_callback(retrieved)  # its waiters may have timed out
            self._reading = (tick, reading)
        await asyncio.shield(self._reading[1])
        kept = self._states.get(job_name)
        if kept is not None and time.monotonic() - kept[1] < STATE_KEPT:
            return kept[0]
        state = await read(self._broker, job_name)
        self._states[job_name] = (state, time.monotonic())
        return state

    async def _read_steering(self) -> None:
        version = await steering_version(self._broker)
        if version != self._version:
            self._states.clear()
            self._version = version


def check_name(name: object) -> str:
    """``name`` if it names a schedule: a job's name, or ``@{id}`` for a runtime one."""
    if isinstance(name, str) and name.startswith("@"):
        runtime_schedules.validate_id(name[1:])
        return name
    return validate_job_name(name)


async def check_queue(broker: BrokerProtocol) -> fleet.Announced:
    """What the fleet on ``broker`` announced; NotFoundError when its queue has no
    schema or no replica ever ran there (a wrong ``--broker`` would else take a change
    that nobody ever reads)."""
    url = broker.display_url
    missing = [c for c in (await broker.plan_schema()).changes if c.action == "create"]
    if missing:
        raise NotFoundError(
            f"{url} has no schema ({missing[0].target} is missing): no worker ever ran "
            "there; check the broker URL"
        )
    found = await fleet.announced(broker)
    if found is None:
        raise NotFoundError(f"no replica has ever run on {url}: check the broker URL")
    return found


async def check_schedule(
    broker: BrokerProtocol, name: str, schedules: Collection[str] | None = None
) -> runtime_schedules.RuntimeSchedule | None:
    """Refuse (NotFoundError) to steer ``name`` where it is not a schedule: a runtime
    schedule (``@{id}``, returned) the broker does not hold, or a code schedule not in
    ``schedules`` (the app's, when known) or else not announced by any replica; and a
    queue :func:`check_queue` refuses."""
    check_name(name)
    announced = await check_queue(broker)
    if name.startswith("@"):
        found = await runtime_schedules.get_schedule(broker, name[1:])
        if found is None:
            raise NotFoundError(
                f"there is no runtime schedule {name[1:]!r} on {broker.display_url}"
            )
        return found
    known = announced.schedules if schedules is None else schedules
    if name not in known:
        where = (
            "the app" if schedules is not None else f"any replica announced on {broker.display_url}"
        )
        raise NotFoundError(
            f"{name!r} is no schedule of {where} (known: {_some(known)}); check the name"
        )
    return None


async def check_job(broker: BrokerProtocol, name: str) -> None:
    """Refuse (NotFoundError) ``name`` when no replica on ``broker`` announced such a job
    (for a runtime schedule set without the app), or the queue is refused."""
    announced = await check_queue(broker)
    if name not in announced.jobs:
        raise NotFoundError(
            f"{name!r} is no job any replica announced on {broker.display_url} "
            f"(known: {_some(announced.jobs)}); check the name"
        )


def _some(names: Collection[str], most: int = 10) -> str:
    listed = sorted(names)
    more = f" and {len(listed) - most} more" if len(listed) > most else ""
    return (", ".join(listed[:most]) or "none") + more


def check_reason(reason: object) -> str | None:
    """``reason`` if it is None or a usable pause reason, else ConfigurationError."""
    if reason is None:
        return None
    if not isinstance(reason, str) or len(reason) > MAX_REASON or not reason.isprintable():
        raise ConfigurationError(
            f"a pause reason must be printable text of at most {MAX_REASON} characters"
        )
    return reason


async def pause(
    broker: BrokerProtocol,
    job_name: str,
    *,
    until: float | None = None,
    reason: str | None = None,
    by: str | None = None,
    clock: Callable[[], float] = time.time,
) -> ScheduleState:
    """Pause the schedule (until ``until``, unix seconds, or until resumed); every
    replica enqueues none of its slots from its next tick on. ``by`` says who paused
    it, shown beside the reason."""
    check_name(job_name)
    reason = check_reason(reason)
    by = None if by is None else check_reason(by[:MAX_REASON])
    now = clock()
    if until is not None and (not _is_time(until) or until <= now):
        raise ConfigurationError(f"a pause must end in the future, got until={until!r}")
    state = await change(
        broker,
        job_name,
        lambda s: replace(
            s, paused=True, paused_until=until, paused_at=now, reason=reason, paused_by=by
        ),
    )
    await _steered(broker)
    log.info(
        "%s: paused%s%s%s",
        job_name,
        "" if until is None else f" until {until:.0f}",
        "" if reason is None else f" ({reason})",
        "" if by is None else f" by {by}",
    )
    return state


async def resume(
    broker: BrokerProtocol, job_name: str, *, clock: Callable[[], float] = time.time
) -> ScheduleState:
    """Lift the pause: every replica enqueues the schedule's slots from its next tick on;
    the slots the pause held back are never caught up."""
    check_name(job_name)
    now = clock()
    state = await change(
        broker,
        job_name,
        lambda s: (
            replace(
                s,
                paused=False,
                paused_until=None,
                paused_at=None,
                reason=None,
                paused_by=None,
                resumed_at=now,
            )
            if s.paused
            else None
        ),
    )
    await _steered(broker)
    log.info("%s: resumed", job_name)
    return state


async def advance(broker: BrokerProtocol, job_name: str, slot: int) -> ScheduleState:
    """Record ``slot`` as enqueued unless a later one is recorded already."""
    return await change(
        broker,
        job_name,
        lambda s: (
            replace(s, latest_slot=slot) if s.latest_slot is None or slot > s.latest_slot else None
        ),
    )


async def trigger(
    broker: BrokerProtocol,
    job_name: str,
    kwargs: Mapping[str, Any] | None = None,
    *,
    clock: Callable[[], float] = time.time,
) -> str:
    """Enqueue one run of the schedule's job now, whatever its pause; return its job id.

    The run's ``ctx.scheduled_at`` is the trigger's time; its deduplication id,
    ``trigger:{job}:{random}``, never equals a tick's. The job's overlap policy and
    limits apply to it as to any run. For a runtime schedule (``@{id}``) the run is of
    its job, with its kwargs updated by ``kwargs``.
    """
    check_name(job_name)
    now = clock()
    job, args = job_name, dict(kwargs or {})
    if job_name.startswith("@"):
        found = await runtime_schedules.get_schedule(broker, job_name[1:])
        if found is None:
            raise ConfigurationError(f"there is no runtime schedule {job_name[1:]!r}")
        job, args = found.job, {**found.kwargs, **args}
    message = JobMessage(
        job_name=job,
        kwargs=args,
        deduplication_id=trigger_deduplication_id(job_name, uuid.uuid4().hex),
        enqueued_at=now,
        scheduled_at=math.floor(now),
    )
    result = await broker.publish(message)
    await change(broker, job_name, lambda s: replace(s, triggered_at=now))
    log.info("%s: triggered as job %s", job_name, result.job_id)
    return result.job_id


MAX_BACKFILL = 1000  # slots one backfill enqueues at most


@dataclass(frozen=True, slots=True)
class Backfilled:
    """What a backfill did: per slot in order, the job id and whether it was stored
    (False: a duplicate of that slot, still remembered by the broker)."""

    slots: tuple[tuple[int, str, bool], ...]

    @property
    def stored(self) -> int:
        return sum(1 for _, _, new in self.slots if new)


async def backfill(
    broker: BrokerProtocol,
    job_name: str,
    schedule: Schedule | None,
    start: float,
    end: float,
    *,
    clock: Callable[[], float] = time.time,
) -> Backfilled:
    """Enqueue each slot ``s`` of ``schedule`` with ``start <= s <= end``, oldest first,
    with its tick's deduplication id and ``ctx.scheduled_at``; then record the latest as
    enqueued, so that catch-up never enqueues them again. Whatever the pause.

    Refused (ConfigurationError) when ``end`` is in the future, ``start > end``, or
    the range holds more than :data:`MAX_BACKFILL` slots. A runtime schedule
    (``@{id}``, ``schedule`` None) is read from the broker.
    """
    check_name(job_name)
    now = clock()
    job, kwargs = job_name, {}
    if job_name.startswith("@"):
        found = await runtime_schedules.get_schedule(broker, job_name[1:])
        if found is None:
            raise ConfigurationError(f"there is no runtime schedule {job_name[1:]!r}")
        job, kwargs, schedule = found.job, dict(found.kwargs), found.schedule
    if schedule is None:
        raise ConfigurationError(f"backfill of {job_name!r} needs its schedule")
    if not (_is_time(start) and _is_time(end)):
        raise ConfigurationError("a backfill range is two unix times")
    if start > end:
        raise ConfigurationError(f"a backfill range must start before it ends ({start} > {end})")
    if end > now:
        raise ConfigurationError(
            "a backfill range must end in the past: the ticker enqueues the slots to come"
        )
    slots = schedule.slots_between(start - 1e-6, end, limit=MAX_BACKFILL + 1)
    if len(slots) > MAX_BACKFILL:
        raise ConfigurationError(
            f"the range holds more than {MAX_BACKFILL} slots of {schedule.describe()}: "
            "backfill it in parts"
        )
    out: list[tuple[int, str, bool]] = []
    for slot in slots:
        result = await broker.publish(
            JobMessage(
                job_name=job,
                kwargs=kwargs,
                deduplication_id=tick_deduplication_id(job_name, slot),
                enqueued_at=clock(),
                scheduled_at=slot,
            )
        )
        out.append((slot, result.job_id, not result.duplicate))
    if slots:
        await advance(broker, job_name, slots[-1])
    log.info(
        "%s: backfilled %d slot(s) from %s to %s (%d already enqueued)",
        job_name,
        len(out),
        datetime.fromtimestamp(start, UTC).isoformat(),
        datetime.fromtimestamp(end, UTC).isoformat(),
        len(out) - sum(new for _, _, new in out),
    )
    return Backfilled(tuple(out))

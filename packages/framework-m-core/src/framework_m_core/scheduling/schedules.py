"""Schedules: when a job is due, computed by arithmetic on the schedule, never from "now" alone.

Slots are whole unix seconds. Every replica that evaluates the same schedule
gets the same slots, so the ticker's deduplication ids agree across replicas.

Cron schedules are evaluated on the wall clock of their IANA time zone. Around
daylight-saving transitions a wall time can be missing or occur twice:

* A wall time skipped by a spring-forward jump fires once, shifted forward by
  the jump (a daily 02:30 job runs at 03:30 on that day in Europe/Berlin).
* A wall time that occurs twice on a fall-back day fires once, at its first
  occurrence, when the hour field is restricted (``30 2 * * *``). When the
  hour field is ``*`` the schedule is about elapsed time within each hour, so
  it fires on both passes (``*/5 * * * *`` keeps running every five minutes).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..errors import ScheduleError
from . import cron as dialect
from .cron import CronSpec
from .zones import MAX_YEAR, MIN_YEAR, Transition, ZoneClock, clock_of

MAX_INTERVAL = 100 * 365 * 86_400
_FIRST = datetime(MIN_YEAR + 1, 1, 1, tzinfo=UTC).timestamp()
_LAST = datetime(MAX_YEAR - 1, 1, 1, tzinfo=UTC).timestamp()


class Schedule(ABC):
    """When a job is due."""

    @abstractmethod
    def next_after(self, t: float) -> int:
        """The first slot (unix seconds) strictly after ``t``."""

    @abstractmethod
    def describe(self) -> str:
        """A short human description, e.g. ``every 5s`` or ``cron '0 9 * * *' (Europe/Berlin)``."""

    def count_between(self, start: float, end: float, limit: int) -> int:
        """How many slots ``s`` have ``start < s <= end``, counted up to ``limit`` at most
        (interval schedules count exactly, at any size)."""
        return len(self.slots_between(start, end, limit))

    def slots_between(self, start: float, end: float, limit: int = 100_000) -> list[int]:
        """The slots ``s`` with ``start < s <= end``, oldest first, at most ``limit`` of them."""
        out: list[int] = []
        slot = self.next_after(start)
        while slot <= end and len(out) < limit:
            out.append(slot)
            slot = self.next_after(slot)
        return out


@dataclass(frozen=True)
class Every(Schedule):
    """A fixed interval of whole seconds; slots are ``offset + k * seconds`` from the unix epoch."""

    seconds: int
    offset: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.seconds, bool) or not isinstance(self.seconds, int):
            raise ScheduleError(f"interval must be whole seconds, got {self.seconds!r}")
        if not 1 <= self.seconds <= MAX_INTERVAL:
            raise ScheduleError(
                f"interval must be 1 to {MAX_INTERVAL} seconds, got {self.seconds} s"
            )
        if isinstance(self.offset, bool) or not isinstance(self.offset, int):
            raise ScheduleError(f"interval offset must be whole seconds, got {self.offset!r}")

    def next_after(self, t: float) -> int:
        k = math.floor((t - self.offset) / self.seconds) + 1
        return self.offset + k * self.seconds

    def count_between(self, start: float, end: float, limit: int) -> int:
        if end <= start:
            return 0
        return max(
            0,
            math.floor((end - self.offset) / self.seconds)
            - math.floor((start - self.offset) / self.seconds),
        )

    def describe(self) -> str:
        return f"every {self.seconds}s"


@dataclass(frozen=True)
class Cron(Schedule):
    """A cron expression (5 fields, or 6 with a leading seconds field) in an IANA time zone;
    the dialect is :mod:`~framework_m_core.scheduling.cron`'s."""

    expression: str
    tz: str = "UTC"
    _spec: CronSpec = field(init=False, repr=False, compare=False)
    _clock: ZoneClock = field(init=False, repr=False, compare=False)
    # The last stretch of one offset looked at: (from, until, prev, next, offset).
    _stretch: list[tuple[float, float, Transition | None, Transition | None, int]] = field(
        init=False, repr=False, compare=False, default_factory=list
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "_spec", dialect.parse(self.expression))
        object.__setattr__(self, "_clock", clock_of(_zone(self.tz)))

    def _around(self, base: int) -> tuple[Transition | None, Transition | None, int]:
        """The offset changes around ``base`` and the offset at it; the last answer is
        kept, since the ticker asks about the same stretch again and again."""
        for lo, hi, prev, nxt, off in self._stretch:
            if lo <= base < hi:
                return prev, nxt, off
        prev, nxt = self._clock.around(base)
        off = prev.after if prev is not None else self._clock.offset(base)
        lo = prev.at if prev is not None else base
        hi = nxt.at if nxt is not None else math.inf
        self._stretch[:] = [(lo, hi, prev, nxt, off)]
        return prev, nxt, off

    def describe(self) -> str:
        return f"cron {self.expression!r} ({self.tz})"

    def next_after(self, t: float) -> int:
        """The least slot after ``t``. The slots are a set defined by the schedule alone
        (see the module docstring), so any instant chained from gives the same ones.

        Between two offset changes the wall clock maps to instants by one offset. After a
        spring-forward jump of J seconds, wall times in the skipped stretch map to the
        J seconds that follow it; after a fall-back the repeated stretch maps to its
        first pass only, unless the hour field is ``*``.
        """
        if not math.isfinite(t) or not _FIRST <= t < _LAST:
            raise ScheduleError(f"{t!r} is outside the years {MIN_YEAR}-{MAX_YEAR} schedules cover")
        spec = self._spec
        base = math.floor(t) + 1  # the first instant that may be a slot
        while True:
            prev, nxt, off = self._around(base)
            end = None if nxt is None else nxt.at + off
            start = base + off
            best: int | None = None
            if prev is not None and prev.after > prev.before:  # skipped wall times, shifted
                jump = prev.after - prev.before
                if base < prev.at + jump:
                    lo = max(prev.at + prev.before, base + prev.before)
                    found = spec.next_match(lo, until=prev.at + prev.after)
                    if found is not None:
                        best = found - prev.before
            elif prev is not None and not spec.hour_is_star:  # skip the second pass
                start = max(start, prev.at + prev.before)
            found = spec.next_match(start, until=end)
            if found is not None and (best is None or found - off < best):
                best = found - off
            if best is not None:
                return best
            if nxt is None:
                raise ScheduleError(f"{self.describe()} has no slot after {t!r}")
            base = nxt.at


def _zone(name: object) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise ScheduleError(f"time zone must be an IANA name such as 'Europe/Berlin', got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"unknown time zone {name!r}: use an IANA name such as 'UTC' or 'Europe/Berlin'"
        ) from None


def every(interval: float | timedelta) -> Every:
    """An interval schedule from seconds or a :class:`~datetime.timedelta` (whole seconds, >= 1)."""
    seconds: float
    if isinstance(interval, timedelta):
        seconds = interval.total_seconds()
    elif isinstance(interval, int) and not isinstance(interval, bool):
        seconds = float(min(interval, MAX_INTERVAL + 1))  # no OverflowError for 10**400
    elif isinstance(interval, float):
        seconds = interval
    else:
        raise ScheduleError(f"interval must be seconds or a timedelta, got {interval!r}")
    if not math.isfinite(seconds) or seconds < 1:
        raise ScheduleError(f"interval must be at least 1 second, got {seconds:g} s")
    if seconds > MAX_INTERVAL:
        raise ScheduleError(
            f"interval must be at most {MAX_INTERVAL} s (100 years), got {seconds:g} s"
        )
    if seconds != int(seconds):
        raise ScheduleError(f"interval must be a whole number of seconds, got {seconds:g} s")
    return Every(int(seconds))


def cron(expression: str, tz: str = "UTC") -> Cron:
    """A cron schedule; ``tz`` is an IANA time zone name."""
    return Cron(expression, tz)


def to_schedule(
    schedule: Schedule | str | None, *, tz: str | None, interval: float | timedelta | None
) -> Schedule | None:
    """Build a schedule from ``@app.job``'s ``schedule=``, ``tz=`` and ``every=`` arguments."""
    if schedule is not None and interval is not None:
        raise ScheduleError("give either schedule= or every=, not both")
    if interval is not None:
        if tz is not None:
            raise ScheduleError("tz= applies to cron schedules, not to every=")
        return every(interval)
    if schedule is None:
        if tz is not None:
            raise ScheduleError("tz= given without a cron schedule")
        return None
    if isinstance(schedule, str):
        return Cron(schedule, tz or "UTC")
    if isinstance(schedule, Schedule):
        if tz is not None:
            raise ScheduleError("tz= applies to cron strings; pass cron(expr, tz=...) instead")
        return schedule
    raise ScheduleError(f"schedule must be a cron string or a Schedule, got {schedule!r}")


def slot_datetime(slot: int) -> datetime:
    """A slot as an aware UTC datetime."""
    return datetime.fromtimestamp(slot, UTC)

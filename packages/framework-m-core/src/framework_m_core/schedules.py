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

import calendar
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from croniter.croniter import CroniterError

from .errors import ScheduleError

_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Lookaround used to find a UTC-offset change near an instant; longer than any DST shift.
_TRANSITION_SPAN = 4 * 3600


class Schedule(ABC):
    """When a job is due."""

    @abstractmethod
    def next_after(self, t: float) -> int:
        """The first slot (unix seconds) strictly after ``t``."""

    @abstractmethod
    def describe(self) -> str:
        """A short human description, e.g. ``every 5s`` or ``cron '0 9 * * *' (Europe/Berlin)``."""

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
        if self.seconds < 1:
            raise ScheduleError(f"interval must be at least 1 second, got {self.seconds} s")
        if isinstance(self.offset, bool) or not isinstance(self.offset, int):
            raise ScheduleError(f"interval offset must be whole seconds, got {self.offset!r}")

    def next_after(self, t: float) -> int:
        k = math.floor((t - self.offset) / self.seconds) + 1
        return self.offset + k * self.seconds

    def describe(self) -> str:
        return f"every {self.seconds}s"


@dataclass(frozen=True)
class Cron(Schedule):
    """A cron expression (5 fields, or 6 with a leading seconds field) in an IANA time zone."""

    expression: str
    tz: str = "UTC"
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)
    _expr: str = field(init=False, repr=False, compare=False)
    _with_seconds: bool = field(init=False, repr=False, compare=False)
    _every_hour: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.expression, str):
            raise ScheduleError(f"cron expression must be a string, got {self.expression!r}")
        expr = " ".join(self.expression.split())
        expr = _ALIASES.get(expr.lower(), expr)
        fields = expr.split(" ")
        if len(fields) not in (5, 6):
            raise ScheduleError(
                f"invalid cron expression {self.expression!r}: expected 5 fields "
                f"(minute hour day month weekday) or 6 with a leading seconds field, "
                f"got {len(fields)}"
            )
        zone = _zone(self.tz)
        with_seconds = len(fields) == 6
        try:
            it = croniter(expr, datetime(2000, 1, 1), second_at_beginning=with_seconds)
            it.get_next(datetime)
        except (CroniterError, ValueError, KeyError) as exc:
            raise ScheduleError(f"invalid cron expression {self.expression!r}: {exc}") from None
        object.__setattr__(self, "_zone", zone)
        object.__setattr__(self, "_expr", expr)
        object.__setattr__(self, "_with_seconds", with_seconds)
        object.__setattr__(self, "_every_hour", fields[-4] == "*")

    def describe(self) -> str:
        return f"cron {self.expression!r} ({self.tz})"

    def next_after(self, t: float) -> int:
        base = math.floor(t)
        offsets = {
            self._offset(base - _TRANSITION_SPAN),
            self._offset(base),
            self._offset(base + _TRANSITION_SPAN),
        }
        lookback = max(offsets) - min(offsets)
        start = datetime.fromtimestamp(base, self._zone).replace(tzinfo=None, fold=0)
        it = croniter(
            self._expr, start - timedelta(seconds=lookback), second_at_beginning=self._with_seconds
        )
        best: int | None = None
        while True:
            naive = it.get_next(datetime)
            for instant in self._instants(naive):
                if instant > t and (best is None or instant < best):
                    best = instant
            if best is None:
                continue
            # Near a transition, a later wall time can map to an earlier instant; past
            # this bound no later wall time can beat ``best``.
            if lookback == 0 or calendar.timegm(naive.timetuple()) - max(offsets) > best:
                return best

    def _offset(self, t: int) -> int:
        off = datetime.fromtimestamp(t, self._zone).utcoffset()
        return int(off.total_seconds()) if off is not None else 0

    def _instants(self, naive: datetime) -> list[int]:
        first = int(naive.replace(tzinfo=self._zone, fold=0).timestamp())
        second = int(naive.replace(tzinfo=self._zone, fold=1).timestamp())
        if first >= second:  # an ordinary wall time, or one skipped by a jump (shifted forward)
            return [first]
        return [first, second] if self._every_hour else [first]


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
    elif isinstance(interval, int | float) and not isinstance(interval, bool):
        seconds = float(interval)
    else:
        raise ScheduleError(f"interval must be seconds or a timedelta, got {interval!r}")
    if not math.isfinite(seconds) or seconds < 1:
        raise ScheduleError(f"interval must be at least 1 second, got {seconds:g} s")
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

"""UTC-offset changes of IANA time zones, found once per zone and year and kept.

``zoneinfo`` answers "what is the offset at this instant" but does not list its
transitions; cron evaluation needs them to split the wall clock into stretches
with one offset each. A year is sampled every few hours and each change is then
pinned to the second by bisection. Two changes less than ``_SAMPLE`` apart
(none in the current database) would be missed.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

_SAMPLE = 6 * 3600
_LOOKAHEAD_YEARS = 30  # how far on to look for the next change before calling it none
MIN_YEAR, MAX_YEAR = 1971, 9998


@dataclass(frozen=True, slots=True)
class Transition:
    """At unix second ``at`` the offset changes from ``before`` to ``after`` (seconds)."""

    at: int
    before: int
    after: int


class ZoneClock:
    """One zone's offsets and transitions; shared by every schedule in that zone."""

    def __init__(self, zone: ZoneInfo) -> None:
        self.zone = zone
        self._years: set[int] = set()
        self._at: list[int] = []  # transition instants, sorted
        self._transitions: list[Transition] = []
        self._lock = threading.Lock()

    def offset(self, t: int) -> int:
        off = datetime.fromtimestamp(t, self.zone).utcoffset()
        return int(off.total_seconds()) if off is not None else 0

    def around(self, t: int) -> tuple[Transition | None, Transition | None]:
        """The last transition at or before ``t`` within a year, and the next one after
        it within ``_LOOKAHEAD_YEARS`` years (None where there is none)."""
        year = datetime.fromtimestamp(t, UTC).year
        self._load(year - 1, year + 1)
        i = bisect.bisect_right(self._at, t)
        prev = self._transitions[i - 1] if i else None
        if prev is not None and prev.at < t - 400 * 86_400:
            prev = None  # long ago: the offset is simply the one at t
        ahead = year + 1
        while i == len(self._at) and ahead < min(year + _LOOKAHEAD_YEARS, MAX_YEAR):
            ahead += 1
            if ahead not in self._years:
                self._load(ahead, ahead)
        nxt = self._transitions[i] if i < len(self._at) else None
        return prev, nxt

    def _load(self, first: int, last: int) -> None:
        years = range(max(first, MIN_YEAR), min(last, MAX_YEAR) + 1)
        missing = [y for y in years if y not in self._years]
        if not missing:
            return
        with self._lock:
            for year in missing:
                if year in self._years:
                    continue
                for found in self._scan(year):
                    i = bisect.bisect_left(self._at, found.at)
                    if i == len(self._at) or self._at[i] != found.at:
                        self._at.insert(i, found.at)
                        self._transitions.insert(i, found)
                self._years.add(year)

    def _scan(self, year: int) -> list[Transition]:
        start = int(datetime(year, 1, 1, tzinfo=UTC).timestamp())
        end = int(datetime(year + 1, 1, 1, tzinfo=UTC).timestamp())
        out = []
        t, off = start, self.offset(start)
        while t < end:
            u = min(t + _SAMPLE, end)
            off_u = self.offset(u)
            if off_u != off:
                lo, hi = t, u  # offset(lo) == off, offset(hi) == off_u
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if self.offset(mid) == off:
                        lo = mid
                    else:
                        hi = mid
                out.append(Transition(hi, off, off_u))
            t, off = u, off_u
        return out


_CLOCKS: dict[str, ZoneClock] = {}


def clock_of(zone: ZoneInfo) -> ZoneClock:
    """The shared :class:`ZoneClock` of ``zone``."""
    clock = _CLOCKS.get(zone.key)
    if clock is None:
        clock = _CLOCKS.setdefault(zone.key, ZoneClock(zone))
    return clock

"""The cron dialect: parsing an expression into field sets, and the wall times it matches.

Five fields (minute hour day-of-month month day-of-week), or six with a leading
seconds field; ``@yearly``, ``@annually``, ``@monthly``, ``@weekly``, ``@daily``,
``@midnight`` and ``@hourly``. In each field: ``*``, a number, a name (``jan``,
``mon``), a range ``a-b`` (``a <= b``; ``a-a`` is the one value ``a``), a step
(``*/n``, ``a-b/n``, ``a/n`` = ``a-max/n``) and lists of these. Day-of-week 0
and 7 are Sunday. Day-of-month also takes ``L`` (the last day), ``LW`` (the
last weekday), ``nW`` (the weekday nearest day ``n`` inside the month; none
in a month without day ``n``) and
``?``; day-of-week takes ``fri#3`` (the third Friday), ``5L``/``L5``/``friL``
(the last Friday) and ``?``. As in Vixie cron and cronie, when both
day-of-month and day-of-week are restricted (neither starts with ``*`` or
``?``) a day matches when either does; otherwise both must.

Refused, naming the token: anything not deterministic or not a schedule (``R``,
``H``, ``@reboot``, ``@every``), reversed ranges, steps of 0, values out of
range, and expressions no date ever matches (``0 0 30 2 *``).

Wall times are counted as "naive seconds": seconds since 1970-01-01 00:00 on
the wall clock of the schedule's zone, with no zone applied.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from datetime import date

from ..errors import ScheduleError

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = {
    m: i
    for i, m in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1
    )
}
_DAYS = {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
# Name, lowest and highest value, and names of each field, in a 6-field expression.
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("second", 0, 59, {}),
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day-of-month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day-of-week", 0, 7, _DAYS),
)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_DAY = 86_400
# No valid expression goes longer than this without a match (Feb 29 skips 1900/2100).
_HORIZON_DAYS = 366 * 30
_NTH = re.compile(r"([a-z0-9]+)#([0-9]+)")
_LAST_DOW = re.compile(r"(?:([a-z0-9]+)l|l([a-z0-9]+))")
_NEAREST = re.compile(r"([0-9]+)w")


@dataclass(frozen=True, slots=True)
class CronSpec:
    """An expression compiled to sorted value lists and day rules."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: frozenset[int]
    days: frozenset[int]  # day-of-month numbers
    last_day: bool  # L
    last_weekday: bool  # LW
    nearest_weekday: frozenset[int]  # nW
    weekdays: frozenset[int]  # 0 = Sunday
    last_of: frozenset[int]  # weekday whose last occurrence in the month matches (5L)
    nth_of: frozenset[tuple[int, int]]  # (weekday, n): the n-th such weekday (fri#3)
    dom_restricted: bool  # the field does not start with * or ?
    dow_restricted: bool
    hour_is_star: bool
    # (year, month) -> its matching days, sorted; filled as months are visited.
    _month_days: dict[tuple[int, int], tuple[int, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )

    def next_match(self, wall: int, until: int | None = None) -> int | None:
        """The first matching wall time (naive seconds) at or after ``wall``; None when
        there is none before ``until`` (or within the horizon)."""
        day, tod = divmod(wall, _DAY)
        last_day = day + _HORIZON_DAYS
        if until is not None:
            last_day = min(last_day, until // _DAY)
        ordinal = day + _EPOCH_ORDINAL
        while day <= last_day:
            d = date.fromordinal(ordinal)
            days = self._days_of(d.year, d.month) if d.month in self.months else ()
            i = bisect.bisect_left(days, d.day)
            if i < len(days):
                if days[i] != d.day:  # jump to the next matching day of the month
                    day, ordinal, tod = day + days[i] - d.day, ordinal + days[i] - d.day, 0
                found = self._time_at_or_after(tod)
                if found is not None:
                    result = day * _DAY + found
                    return result if until is None or result < until else None
                if i + 1 < len(days):
                    step = days[i + 1] - days[i]
                    day, ordinal, tod = day + step, ordinal + step, 0
                    continue
            ordinal = _next_month(d.year, d.month)
            day, tod = ordinal - _EPOCH_ORDINAL, 0
        return None

    def _days_of(self, year: int, month: int) -> tuple[int, ...]:
        """The days of ``year``-``month`` that match, computed once and kept."""
        days = self._month_days.get((year, month))
        if days is None:
            first = date(year, month, 1).toordinal()
            length = _month_length(year, month)
            days = tuple(
                d for d in range(1, length + 1) if self.day_matches(year, month, d, first + d - 1)
            )
            if len(self._month_days) >= 240:  # twenty years of months is plenty
                self._month_days.clear()
            self._month_days[(year, month)] = days
        return days

    def _time_at_or_after(self, tod: int) -> int | None:
        """The first matching time of day (seconds) at or after ``tod``, if any."""
        h0, rest = divmod(tod, 3600)
        m0, s0 = divmod(rest, 60)
        hours, minutes, seconds = self.hours, self.minutes, self.seconds
        for h in hours[bisect.bisect_left(hours, h0) :]:
            m_start = m0 if h == h0 else 0
            for m in minutes[bisect.bisect_left(minutes, m_start) :]:
                s_start = s0 if (h == h0 and m == m0) else 0
                i = bisect.bisect_left(seconds, s_start)
                if i < len(seconds):
                    return h * 3600 + m * 60 + seconds[i]
        return None

    def day_matches(self, year: int, month: int, day: int, ordinal: int) -> bool:
        """Vixie cron's rule: either field when both are restricted, else both."""
        if self.dom_restricted and self.dow_restricted:
            return self._dom_matches(year, month, day) or self._dow_matches(
                year, month, day, ordinal
            )
        return self._dom_matches(year, month, day) and self._dow_matches(year, month, day, ordinal)

    def _dom_matches(self, year: int, month: int, day: int) -> bool:
        if day in self.days:
            return True
        length = _month_length(year, month)
        if self.last_day and day == length:
            return True
        if self.last_weekday and day == _nearest_weekday(year, month, length, length):
            return True
        return any(  # a month without day n has no nW
            n <= length and day == _nearest_weekday(year, month, n, length)
            for n in self.nearest_weekday
        )

    def _dow_matches(self, year: int, month: int, day: int, ordinal: int) -> bool:
        weekday = ordinal % 7  # ordinal 7 (0001-01-07) was a Sunday
        if weekday in self.weekdays:
            return True
        if weekday in self.last_of and day + 7 > _month_length(year, month):
            return True
        return (weekday, (day - 1) // 7 + 1) in self.nth_of


def parse(expression: object) -> CronSpec:
    """Compile ``expression``; :class:`ScheduleError` naming the field and token if invalid."""
    if not isinstance(expression, str):
        raise ScheduleError(f"cron expression must be a string, got {expression!r}")
    tokens = _tokens(expression)
    rules = _DayRules()
    values = [_field_values(index, token, rules, expression) for index, token in enumerate(tokens)]
    weekdays = {0 if d == 7 else d for d in values[5]}
    dom_restricted = not tokens[3].startswith(("*", "?"))
    dow_restricted = not tokens[5].startswith(("*", "?"))
    spec = CronSpec(
        seconds=tuple(sorted(values[0])),
        minutes=tuple(sorted(values[1])),
        hours=tuple(sorted(values[2])),
        months=frozenset(values[4]),
        days=frozenset(values[3]),
        last_day=rules.last_day,
        last_weekday=rules.last_weekday,
        nearest_weekday=frozenset(rules.nearest),
        weekdays=frozenset(weekdays),
        last_of=frozenset(rules.last_of),
        nth_of=frozenset(rules.nth_of),
        dom_restricted=dom_restricted,
        dow_restricted=dow_restricted,
        hour_is_star=tokens[2] == "*",
    )
    start = (date(2000, 1, 1).toordinal() - _EPOCH_ORDINAL) * _DAY
    if spec.next_match(start) is None:
        raise ScheduleError(f"invalid cron expression {expression!r}: no date ever matches it")
    return spec


def _tokens(expression: str) -> list[str]:
    """The six fields of ``expression`` (an alias expanded, seconds ``0`` when left out)."""
    text = " ".join(expression.split()).lower()
    if text.startswith("@"):
        alias = ALIASES.get(text)
        if alias is None:
            raise ScheduleError(
                f"invalid cron expression {expression!r}: {text.split()[0]!r} is not a schedule "
                f"(use one of {', '.join(ALIASES)})"
            )
        text = alias
    tokens = text.split(" ")
    if len(tokens) not in (5, 6):
        raise ScheduleError(
            f"invalid cron expression {expression!r}: expected 5 fields (minute hour "
            f"day-of-month month day-of-week) or 6 with a leading seconds field, got {len(tokens)}"
        )
    if len(tokens) == 5:
        tokens.insert(0, "0")
    return tokens


def _field_values(index: int, token: str, rules: _DayRules, expression: str) -> set[int]:
    """The values field ``index`` (``token``) matches; its day rules go into ``rules``."""
    name, low, high, names = _FIELDS[index]
    found: set[int] = set()
    for item in token.split(","):
        where = f"{name} field {token!r}"
        if item in ("r", "h") or (item.startswith(("r", "h")) and item[1:2] in ("", "(", "/")):
            raise ScheduleError(
                f"invalid cron expression {expression!r}: {item.upper()!r} in the {where} "
                "is not deterministic: every replica must compute the same slots"
            )
        if index == 3 and _day_of_month_rule(item, rules, expression, where):
            continue
        if index == 5 and _day_of_week_rule(item, rules, expression, where):
            continue
        if item == "?" and index in (3, 5):
            found.update(range(low, high + 1))
            continue
        found.update(_values(item, low, high, names, expression, where))
    return found


def _values(
    item: str, low: int, high: int, names: dict[str, int], expression: str, where: str
) -> range:
    def bad(why: str) -> ScheduleError:
        return ScheduleError(
            f"invalid cron expression {expression!r}: {item!r} in the {where} {why}"
        )

    def number(text: str) -> int:
        if text in names:
            return names[text]
        if not text.isdigit() or len(text) > 4:
            raise bad("is not a number or a name")
        value = int(text)
        if not low <= value <= high:
            raise bad(f"is out of range ({low}-{high})")
        return value

    base, slash, step_text = item.partition("/")
    step = 1
    if slash:
        if not step_text.isdigit() or len(step_text) > 4 or int(step_text) == 0:
            raise bad("has a step that is not a whole number from 1")
        step = int(step_text)
    if base == "*":
        return range(low, high + 1, step)
    first, dash, last = base.partition("-")
    start = number(first)
    end = number(last) if dash else (high if slash else start)
    if end < start:
        raise bad("is a reversed range (write the values as a list instead)")
    return range(start, end + 1, step)


@dataclass
class _DayRules:
    """The day rules met while parsing: L, LW and nW (day-of-month), 5L and fri#3."""

    last_day: bool = False
    last_weekday: bool = False
    nearest: set[int] = field(default_factory=set)
    last_of: set[int] = field(default_factory=set)
    nth_of: set[tuple[int, int]] = field(default_factory=set)


def _day_of_month_rule(item: str, rules: _DayRules, expression: str, where: str) -> bool:
    """Record ``L``, ``LW`` or ``nW``; False when ``item`` is none of them."""
    if item == "l":
        rules.last_day = True
    elif item in ("lw", "wl"):
        rules.last_weekday = True
    elif match := _NEAREST.fullmatch(item):
        day = int(match.group(1)[:4])
        if not 1 <= day <= 31:
            raise ScheduleError(
                f"invalid cron expression {expression!r}: {item!r} in the {where} names a day "
                "out of range (1-31)"
            )
        rules.nearest.add(day)
    else:
        return False
    return True


def _day_of_week_rule(item: str, rules: _DayRules, expression: str, where: str) -> bool:
    """Record ``fri#3`` or ``5L``/``L5``/``friL``; False when ``item`` is neither."""

    def weekday(text: str) -> int:
        value = _DAYS.get(text)
        if value is None and text.isdigit() and len(text) <= 1 and int(text) <= 7:
            value = int(text) % 7
        if value is None:
            raise ScheduleError(
                f"invalid cron expression {expression!r}: {item!r} in the {where} does not "
                "name a weekday (0-7 or sun-sat)"
            )
        return value

    if match := _NTH.fullmatch(item):
        n = int(match.group(2)[:4])
        if not 1 <= n <= 5:
            raise ScheduleError(
                f"invalid cron expression {expression!r}: {item!r} in the {where}: the "
                "occurrence after '#' must be 1 to 5"
            )
        rules.nth_of.add((weekday(match.group(1)), n))
        return True
    if item != "l" and (match := _LAST_DOW.fullmatch(item)):
        rules.last_of.add(weekday(match.group(1) or match.group(2)))
        return True
    return False


def _month_length(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _nearest_weekday(year: int, month: int, day: int, length: int) -> int:
    """The Monday-to-Friday day nearest ``day`` without leaving the month (Quartz ``W``)."""
    weekday = date(year, month, day).weekday()  # Monday = 0
    if weekday == 5:  # Saturday: the Friday before, or the Monday after on the 1st
        return day - 1 if day > 1 else day + 2
    if weekday == 6:  # Sunday: the Monday after, or the Friday before at the month's end
        return day + 1 if day < length else day - 2
    return day


def _next_month(year: int, month: int) -> int:
    """The ordinal of the first day of the month after ``year``-``month``."""
    return date(year + month // 12, month % 12 + 1, 1).toordinal()

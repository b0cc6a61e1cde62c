"""The cron dialect as a specification: what each token matches, what is refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from framework_m_core import ScheduleError, cron
from framework_m_core.scheduling.cron import parse


def ts(*args: int) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp())  # type: ignore[misc]


def first(expr: str, n: int, start: tuple[int, ...] = (2026, 1, 1)) -> list[str]:
    """The first ``n`` slots of ``expr`` (UTC) from ``start``, as 'Www YYYY-MM-DD HH:MM:SS'."""
    s, t, out = cron(expr), ts(*start) - 1, []
    for _ in range(n):
        t = s.next_after(t)
        out.append(datetime.fromtimestamp(t, UTC).strftime("%a %Y-%m-%d %H:%M:%S"))
    return out


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        # An equal range is the one value: Mondays only, 23:30 only.
        ("0 9 * * 1-1", ["Mon 2026-01-05 09:00:00", "Mon 2026-01-12 09:00:00"]),
        ("0 9 * * mon-mon", ["Mon 2026-01-05 09:00:00", "Mon 2026-01-12 09:00:00"]),
        ("30 23-23 * * *", ["Thu 2026-01-01 23:30:00", "Fri 2026-01-02 23:30:00"]),
        # Both day fields restricted: either matches (cronie).
        ("0 0 17 * fri#4", ["Sat 2026-01-17 00:00:00", "Fri 2026-01-23 00:00:00",
                            "Tue 2026-02-17 00:00:00"]),
        ("0 0 1,15 * mon", ["Thu 2026-01-01 00:00:00", "Mon 2026-01-05 00:00:00",
                            "Mon 2026-01-12 00:00:00", "Thu 2026-01-15 00:00:00"]),
        # One of them starting with * or ?: both must match.
        ("0 0 */10 * mon", ["Mon 2026-05-11 00:00:00", "Mon 2026-06-01 00:00:00"]),
        ("0 0 ? * 0", ["Sun 2026-01-04 00:00:00", "Sun 2026-01-11 00:00:00"]),
        ("0 0 * * */2", ["Thu 2026-01-01 00:00:00", "Sat 2026-01-03 00:00:00",
                         "Sun 2026-01-04 00:00:00"]),
        # Last and nth weekdays, as cronie, Quartz and croniter users write them.
        ("0 0 * * 5L", ["Fri 2026-01-30 00:00:00", "Fri 2026-02-27 00:00:00"]),
        ("0 0 * * L5", ["Fri 2026-01-30 00:00:00", "Fri 2026-02-27 00:00:00"]),
        ("0 0 * * friL", ["Fri 2026-01-30 00:00:00", "Fri 2026-02-27 00:00:00"]),
        ("0 0 * * fri#3", ["Fri 2026-01-16 00:00:00", "Fri 2026-02-20 00:00:00"]),
        ("0 0 * * 7#1", ["Sun 2026-01-04 00:00:00", "Sun 2026-02-01 00:00:00"]),
        # Last day, last weekday, nearest weekday.
        ("0 0 L * *", ["Sat 2026-01-31 00:00:00", "Sat 2026-02-28 00:00:00"]),
        ("0 0 L 2 *", ["Sat 2026-02-28 00:00:00", "Sun 2027-02-28 00:00:00",
                       "Tue 2028-02-29 00:00:00"]),
        ("0 0 LW * *", ["Fri 2026-01-30 00:00:00", "Fri 2026-02-27 00:00:00"]),
        ("0 0 1W * *", ["Thu 2026-01-01 00:00:00", "Mon 2026-02-02 00:00:00",
                        "Mon 2026-03-02 00:00:00"]),
        ("0 0 31W * *", ["Fri 2026-01-30 00:00:00", "Tue 2026-03-31 00:00:00"]),
        # Steps, lists, names, 7 as Sunday, a/n as a-max/n.
        ("*/20 8-9 * * *", ["Thu 2026-01-01 08:00:00", "Thu 2026-01-01 08:20:00",
                            "Thu 2026-01-01 08:40:00", "Thu 2026-01-01 09:00:00"]),
        ("50/5 0 * * *", ["Thu 2026-01-01 00:50:00", "Thu 2026-01-01 00:55:00",
                          "Fri 2026-01-02 00:50:00"]),
        ("0 12 1 jan,JUL *", ["Thu 2026-01-01 12:00:00", "Wed 2026-07-01 12:00:00"]),
        ("0 0 * * 7", ["Sun 2026-01-04 00:00:00", "Sun 2026-01-11 00:00:00"]),
        ("0 0 * * 5-7", ["Fri 2026-01-02 00:00:00", "Sat 2026-01-03 00:00:00",
                         "Sun 2026-01-04 00:00:00", "Fri 2026-01-09 00:00:00"]),
        # Seconds, aliases, leap days.
        ("*/20 0 0 * * *", ["Thu 2026-01-01 00:00:00", "Thu 2026-01-01 00:00:20",
                            "Thu 2026-01-01 00:00:40", "Fri 2026-01-02 00:00:00"]),
        ("@hourly", ["Thu 2026-01-01 00:00:00", "Thu 2026-01-01 01:00:00"]),
        ("@weekly", ["Sun 2026-01-04 00:00:00", "Sun 2026-01-11 00:00:00"]),
        ("@yearly", ["Thu 2026-01-01 00:00:00", "Fri 2027-01-01 00:00:00"]),
        ("0 0 29 2 *", ["Tue 2028-02-29 00:00:00", "Sun 2032-02-29 00:00:00"]),
    ],
)  # fmt: skip
def test_what_an_expression_matches(expr: str, expected: list[str]) -> None:
    assert first(expr, len(expected)) == expected


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("R * * * *", "'R' in the minute field 'r' is not deterministic"),
        ("0 H * * *", "'H' in the hour field 'h' is not deterministic"),
        ("H(0-29) * * * *", "is not deterministic"),
        ("@reboot", "'@reboot' is not a schedule"),
        ("@every 5m", "'@every' is not a schedule"),
        ("5-1 * * * *", "'5-1' in the minute field '5-1' is a reversed range"),
        ("0 0 * * fri-mon", "is a reversed range"),
        ("*/0 * * * *", "has a step that is not a whole number from 1"),
        ("60 * * * *", "'60' in the minute field '60' is out of range (0-59)"),
        ("0 24 * * *", "out of range (0-23)"),
        ("0 0 0 * *", "out of range (1-31)"),
        ("0 0 * 13 *", "out of range (1-12)"),
        ("0 0 * * 8", "out of range (0-7)"),
        ("0 0 * * fri#6", "the occurrence after '#' must be 1 to 5"),
        ("0 0 * * funday#1", "does not name a weekday"),
        ("0 0 32W * *", "names a day out of range (1-31)"),
        ("0 0 30 2 *", "no date ever matches it"),
        ("0 0 31 4,6,9,11 *", "no date ever matches it"),
        ("x * * * *", "'x' in the minute field 'x' is not a number or a name"),
        ("1,,2 * * * *", "'' in the minute field '1,,2' is not a number or a name"),
        ("99999999999999999999 * * * *", "is not a number or a name"),
        ("* * * *", "expected 5 fields"),
        ("* * * * * * *", "got 7"),
    ],
)
def test_what_is_refused_names_the_field_and_token(expr: str, says: str) -> None:
    with pytest.raises(ScheduleError, match="invalid cron expression") as raised:
        cron(expr)
    assert says in str(raised.value)
    assert "\n" not in str(raised.value)


def test_the_random_token_would_give_replicas_different_slots() -> None:
    """Every replica computes the same slot from the same instant."""
    with pytest.raises(ScheduleError, match="not deterministic"):
        parse("R R * * *")


@pytest.mark.parametrize("t", [1e12, -1.0, float("inf"), float("nan")])
def test_instants_outside_the_calendar_are_refused(t: float) -> None:
    with pytest.raises(ScheduleError):
        cron("0 0 * * *").next_after(t)


def test_a_whole_hour_range_is_found_without_walking_it() -> None:
    """A far first match (a leap day) is reached by jumping months, not seconds."""
    assert cron("59 23 29 2 *").next_after(ts(2028, 3, 1)) == ts(2032, 2, 29, 23, 59)

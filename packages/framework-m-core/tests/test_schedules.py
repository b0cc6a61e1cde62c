from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from framework_m_core import Cron, Every, ScheduleError, cron, every
from framework_m_core.scheduling.schedules import to_schedule

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def ts(*args: int, tz: ZoneInfo | None = None, fold: int = 0) -> int:
    return int(datetime(*args, tzinfo=tz or UTC, fold=fold).timestamp())  # type: ignore[misc]


def fires(schedule: Cron | Every, start: int, end: int) -> list[int]:
    return schedule.slots_between(start, end)


def local(slot: int, tz: ZoneInfo) -> str:
    return datetime.fromtimestamp(slot, tz).strftime("%Y-%m-%d %H:%M:%S%z")


class TestEvery:
    def test_slots_are_multiples_of_the_interval_since_the_epoch(self) -> None:
        s = every(5)
        assert s.next_after(1_700_000_000) == 1_700_000_005
        assert s.next_after(1_700_000_001.5) == 1_700_000_005
        assert s.next_after(1_700_000_004.999) == 1_700_000_005

    def test_same_slots_whenever_computed(self) -> None:
        s = every(timedelta(minutes=1))
        assert fires(s, 1000, 1200) == fires(s, 1000, 1200) == [1020, 1080, 1140, 1200]
        assert s.next_after(1081) == s.next_after(1139) == 1140

    @pytest.mark.parametrize(
        ("value", "message"),
        [
            (0.5, "at least 1 second"),
            (0, "at least 1 second"),
            (-3, "at least 1 second"),
            (1.5, "whole number of seconds"),
            (timedelta(milliseconds=1500), "whole number of seconds"),
            ("5", "seconds or a timedelta"),
            (True, "seconds or a timedelta"),
            (10**400, "at most 3153600000 s"),
            (float("inf"), "at least 1 second"),
            (timedelta(days=365 * 200), "at most 3153600000 s"),
        ],
    )
    def test_invalid_intervals(self, value: object, message: str) -> None:
        with pytest.raises(ScheduleError, match=message):
            every(value)  # type: ignore[arg-type]


class TestCron:
    def test_five_fields_in_utc(self) -> None:
        s = cron("0 9 * * 1-5")
        monday = ts(2026, 11, 30, 9)
        assert s.next_after(ts(2026, 11, 28, 12)) == monday  # Saturday -> Monday 09:00
        assert s.next_after(monday) == monday + 86400

    def test_leading_seconds_field(self) -> None:
        s = cron("*/15 * * * * *")
        assert fires(s, ts(2026, 1, 1), ts(2026, 1, 1, 0, 1)) == [
            ts(2026, 1, 1) + n for n in (15, 30, 45, 60)
        ]

    def test_every_second(self) -> None:
        s = cron("* * * * * *")
        start = ts(2026, 1, 1)
        assert fires(s, start, start + 3) == [start + 1, start + 2, start + 3]

    def test_aliases(self) -> None:
        assert cron("@hourly").next_after(ts(2026, 1, 1, 0, 30)) == ts(2026, 1, 1, 1)
        assert cron("@daily", tz="Europe/Berlin").next_after(ts(2026, 1, 1, 12)) == ts(
            2026, 1, 2, tz=BERLIN
        )

    def test_time_zone_applies(self) -> None:
        s = cron("0 9 * * *", tz="Europe/Berlin")
        assert local(s.next_after(ts(2026, 7, 1)), BERLIN) == "2026-07-01 09:00:00+0200"
        assert local(s.next_after(ts(2026, 12, 1)), BERLIN) == "2026-12-01 09:00:00+0100"

    @pytest.mark.parametrize(
        ("expr", "message"),
        [
            ("61 * * * *", "invalid cron expression '61 \\* \\* \\* \\*'"),
            ("* * *", "expected 5 fields"),
            ("* * * * * * *", "expected 5 fields"),
            ("0 9 * * mon-xyz", "invalid cron expression"),
            ("", "expected 5 fields"),
        ],
    )
    def test_invalid_expressions(self, expr: str, message: str) -> None:
        with pytest.raises(ScheduleError, match=message):
            cron(expr)

    def test_unknown_time_zone(self) -> None:
        with pytest.raises(ScheduleError, match="unknown time zone 'Mars/Olympus'"):
            cron("0 9 * * *", tz="Mars/Olympus")
        with pytest.raises(ScheduleError, match="unknown time zone"):
            cron("0 9 * * *", tz="../etc/passwd")


class TestDaylightSaving:
    """A daily job runs once per local day, on the transition days too."""

    def daily(self, tz: ZoneInfo, first_day: datetime, days: int, expr: str) -> list[str]:
        s = cron(expr, tz=str(tz))
        start = int(first_day.replace(tzinfo=tz).timestamp())
        end = int((first_day + timedelta(days=days)).replace(tzinfo=tz).timestamp())
        return [local(slot, tz) for slot in fires(s, start, end)]

    def test_spring_forward_berlin_runs_once_shifted_by_the_jump(self) -> None:
        # 2026-03-29 02:00 CET -> 03:00 CEST: 02:30 does not exist that day.
        assert self.daily(BERLIN, datetime(2026, 3, 28), 3, "30 2 * * *") == [
            "2026-03-28 02:30:00+0100",
            "2026-03-29 03:30:00+0200",
            "2026-03-30 02:30:00+0200",
        ]

    def test_fall_back_berlin_runs_once_at_the_first_occurrence(self) -> None:
        # 2026-10-25 03:00 CEST -> 02:00 CET: 02:30 happens twice that day.
        assert self.daily(BERLIN, datetime(2026, 10, 24), 3, "30 2 * * *") == [
            "2026-10-24 02:30:00+0200",
            "2026-10-25 02:30:00+0200",
            "2026-10-26 02:30:00+0100",
        ]

    def test_new_york_transitions(self) -> None:
        assert self.daily(NEW_YORK, datetime(2026, 3, 7), 3, "30 2 * * *") == [
            "2026-03-07 02:30:00-0500",
            "2026-03-08 03:30:00-0400",
            "2026-03-09 02:30:00-0400",
        ]
        assert self.daily(NEW_YORK, datetime(2026, 10, 31), 3, "30 1 * * *") == [
            "2026-10-31 01:30:00-0400",
            "2026-11-01 01:30:00-0400",
            "2026-11-02 01:30:00-0500",
        ]

    def test_wildcard_hour_keeps_elapsed_time_through_fall_back(self) -> None:
        s = cron("*/30 * * * *", tz="Europe/Berlin")
        got = fires(s, ts(2026, 10, 24, 23), ts(2026, 10, 25, 2))
        assert got == [ts(2026, 10, 24, 23) + 1800 * n for n in range(1, 7)]

    def test_wildcard_hour_through_spring_forward_has_no_duplicates(self) -> None:
        s = cron("*/30 * * * *", tz="Europe/Berlin")
        got = fires(s, ts(2026, 3, 28, 23), ts(2026, 3, 29, 2))
        assert got == [ts(2026, 3, 28, 23) + 1800 * n for n in range(1, 7)]

    def test_each_second_through_fall_back_is_continuous(self) -> None:
        s = cron("* * * * * *", tz="Europe/Berlin")
        start = ts(2026, 10, 25, 0, 59, 50)  # 02:59:50 CEST, just before the change
        assert fires(s, start, start + 20) == list(range(start + 1, start + 21))


class TestToSchedule:
    def test_forms(self) -> None:
        assert to_schedule("0 9 * * *", tz="Europe/Berlin", interval=None) == Cron(
            "0 9 * * *", "Europe/Berlin"
        )
        assert to_schedule(None, tz=None, interval=5) == Every(5)
        assert to_schedule(None, tz=None, interval=None) is None

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"schedule": "* * * * *", "interval": 5, "tz": None}, "not both"),
            ({"schedule": None, "interval": 5, "tz": "UTC"}, "tz= applies to cron"),
            ({"schedule": None, "interval": None, "tz": "UTC"}, "without a cron"),
            ({"schedule": 5, "interval": None, "tz": None}, "cron string or a Schedule"),
        ],
    )
    def test_conflicts(self, kwargs: dict[str, object], message: str) -> None:
        with pytest.raises(ScheduleError, match=message):
            to_schedule(**kwargs)  # type: ignore[arg-type]

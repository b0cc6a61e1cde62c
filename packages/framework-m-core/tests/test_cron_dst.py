"""The DST rule in every zone family, whatever instant ``next_after`` is called from.

The rule (README): a wall time skipped by a spring-forward jump fires once, shifted
by the jump; a wall time that occurs twice fires once, at its first occurrence,
unless the hour field is ``*`` (then on both passes). The table holds hand-checked
days; the property tests compare chained ``next_after`` with the rule computed by
other means (zoneinfo's fold mapping of every matching wall time) around each
transition of 2025-2028, from random start instants.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from framework_m_core import App, JobContext, cron
from framework_m_core.scheduling.cron import parse
from framework_m_core.scheduling.zones import clock_of
from framework_m_core.testing import ticks_between

ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "America/Santiago",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Asia/Kolkata",
    "UTC",
]


def local(tz: str, *args: int, fold: int = 0) -> int:
    """The instant of a local wall time that exists (``fold`` picks a repeated one's pass)."""
    return int(datetime(*args, tzinfo=ZoneInfo(tz), fold=fold).timestamp())  # type: ignore[misc]


def chain(expr: str, tz: str, start: float, end: float) -> list[int]:
    """The slots in (start, end], chained as the running ticker does."""
    schedule, out = cron(expr, tz), []
    t = schedule.next_after(start)
    while t <= end:
        out.append(t)
        t = schedule.next_after(t)
    return out


@pytest.mark.parametrize(
    ("expr", "tz", "day", "expected"),
    [
        # Spring forward, whole hour (02:00 -> 03:00): 02:30 runs at 03:30.
        ("30 2 * * *", "Europe/Berlin", (2026, 3, 29), [(3, 30)]),
        ("30 2 * * *", "America/New_York", (2026, 3, 8), [(3, 30)]),
        # Spring forward at midnight (00:00 -> 01:00): midnight itself runs at 01:00.
        ("0 0 * * *", "America/Santiago", (2026, 9, 6), [(1, 0)]),
        ("30 0 * * *", "America/Santiago", (2026, 9, 6), [(1, 30)]),
        # A 30-minute jump (02:00 -> 02:30): 02:15 runs at 02:45, 02:30 at 02:30.
        ("15,30 2 * * *", "Australia/Lord_Howe", (2026, 10, 4), [(2, 30), (2, 45)]),
        # A jump that starts at :45 (02:45 -> 03:45): 03:00-03:44 run at 04:00-04:44.
        ("*/15 3 * * *", "Pacific/Chatham", (2026, 9, 27), [(3, 45), (4, 0), (4, 15), (4, 30)]),
        # Fall back, hour restricted: the first pass only.
        ("30 2 * * *", "Europe/Berlin", (2026, 10, 25), [(2, 30, 0)]),
        ("30 1 * * *", "America/New_York", (2026, 11, 1), [(1, 30, 0)]),
        ("45 1 * * *", "Australia/Lord_Howe", (2026, 4, 5), [(1, 45, 0)]),
        ("0,30 3 * * *", "Pacific/Chatham", (2026, 4, 5), [(3, 0, 0), (3, 30, 0)]),
        # Fall back, hour field *: both passes.
        ("*/15 * * * *", "Australia/Lord_Howe", (2026, 4, 5),
         [(1, 30, 0), (1, 45, 0), (1, 30, 1), (1, 45, 1), (2, 0, 0)]),
        # No DST: a fixed half-hour offset.
        ("0 9 * * *", "Asia/Kolkata", (2026, 3, 29), [(9, 0)]),
    ],
)  # fmt: skip
def test_hand_checked_days(
    expr: str, tz: str, day: tuple[int, int, int], expected: list[tuple[int, ...]]
) -> None:
    """``expected`` are local wall times that exist; (h, m, fold) picks a repeated one's
    pass. They are all the slots from the first to the last."""
    want = [local(tz, *day, h, m, fold=rest[0] if rest else 0) for h, m, *rest in expected]
    assert chain(expr, tz, want[0] - 1, want[-1]) == want


def test_a_whole_skipped_hour_of_minutes_runs_once_each_in_chatham() -> None:
    """`* 3 * * *` on the change day: 03:45-03:59 as they are, 03:00-03:44 an hour on."""
    tz = "Pacific/Chatham"
    got = chain("* 3 * * *", tz, local(tz, 2026, 9, 27, 0, 0), local(tz, 2026, 9, 27, 6, 0))
    assert got == list(range(local(tz, 2026, 9, 27, 3, 45), local(tz, 2026, 9, 27, 4, 45), 60))


def rule(expr: str, tz: str, lo: int, hi: int) -> list[int]:
    """The slots in (lo, hi] by the README's rule, computed without the schedule's own
    transition logic: every matching wall time near the range, mapped by zoneinfo."""
    spec, zone = parse(expr), ZoneInfo(tz)
    epoch = datetime(1970, 1, 1)
    out: set[int] = set()
    wall = int((datetime.fromtimestamp(lo, zone).replace(tzinfo=None) - epoch).total_seconds())
    wall -= 3 * 3600
    end = int((datetime.fromtimestamp(hi, zone).replace(tzinfo=None) - epoch).total_seconds())
    while (found := spec.next_match(wall, until=end + 3 * 3600)) is not None:
        naive = epoch + timedelta(seconds=found)
        first = int(naive.replace(tzinfo=zone, fold=0).timestamp())
        second = int(naive.replace(tzinfo=zone, fold=1).timestamp())
        out.add(first)  # a skipped time's fold=0 instant is it shifted by the jump
        if second > first and spec.hour_is_star:
            out.add(second)
        wall = found + 1
    return sorted(s for s in out if lo < s <= hi)


def transitions(tz: str) -> list[int]:
    clock = clock_of(ZoneInfo(tz))
    found, t = [], int(datetime(2025, 1, 1, tzinfo=UTC).timestamp())
    end = int(datetime(2029, 1, 1, tzinfo=UTC).timestamp())
    while (nxt := clock.around(t)[1]) is not None and nxt.at < end:
        found.append(nxt.at)
        t = nxt.at
    return found or [int(datetime(2026, 3, 29, tzinfo=UTC).timestamp())]


def field(low: int, high: int) -> st.SearchStrategy[str]:
    number = st.integers(low, high)
    one = st.one_of(
        st.just("*"),
        number.map(str),
        st.tuples(number, number).map(lambda ab: f"{min(ab)}-{max(ab)}"),
        st.integers(1, max(1, (high - low) // 2)).map(lambda n: f"*/{n}"),
        st.tuples(number, st.integers(1, 20)).map(lambda an: f"{an[0]}/{an[1]}"),
    )
    return st.lists(one, min_size=1, max_size=3).map(",".join)


EXPRESSIONS = st.tuples(
    st.one_of(st.just(None), field(0, 59)),
    field(0, 59),
    st.one_of(st.just("*"), field(0, 23)),
    st.one_of(st.just("*"), st.just("*"), field(1, 31), st.just("L")),
    st.just("*"),
    st.one_of(st.just("*"), st.just("*"), field(0, 6), st.just("sun#1")),
).map(lambda f: " ".join(x for x in f if x is not None))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    expr=EXPRESSIONS,
    tz=st.sampled_from(ZONES),
    pick=st.integers(0, 10_000),
    before=st.integers(0, 4 * 3600),
    earlier=st.integers(1, 3 * 86_400),
)
def test_replicas_agree_and_follow_the_rule_around_transitions(
    expr: str, tz: str, pick: int, before: int, earlier: int
) -> None:
    try:
        parse(expr)
    except Exception:
        return  # a generated expression no date matches
    changes = transitions(tz)
    at = changes[pick % len(changes)]
    lo, hi = at - before, at + 4 * 3600
    want = rule(expr, tz, lo, hi)
    assert chain(expr, tz, lo, hi) == want  # a replica starting just before the change
    assert [s for s in chain(expr, tz, lo - earlier, hi) if s > lo] == want  # one earlier
    assert all(a < b for a, b in itertools.pairwise(want))


async def ticked(tz: str, expr: str, start: float, end: float) -> list[str]:
    """The dedup ids a ticker started at ``start`` enqueues until ``end``."""
    app = App()

    @app.job(schedule=expr, tz=tz)
    async def job(ctx: JobContext) -> None: ...

    ticks = await ticks_between(
        app, datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC)
    )
    return [t.deduplication_id for t in ticks]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("tz", "expr", "day", "hour"),
    [
        ("Pacific/Chatham", "* 3 * * *", (2026, 9, 27), 1),
        ("Australia/Lord_Howe", "*/5 2 * * *", (2026, 10, 4), 1),
        ("Australia/Lord_Howe", "*/5 1 * * *", (2026, 4, 5), 1),
        ("Pacific/Chatham", "*/10 * * * *", (2026, 4, 5), 2),
    ],
)
async def test_two_tickers_started_apart_enqueue_the_same_slots_on_the_change_day(
    tz: str, expr: str, day: tuple[int, int, int], hour: int
) -> None:
    """One replica starts a day before a Chatham or Lord_Howe change, one shortly
    before it; from the later start on they enqueue the same dedup ids."""
    late_start = local(tz, *day, hour, 1)
    end = late_start + 5 * 3600
    early = await ticked(tz, expr, late_start - 86_400, end)
    late = await ticked(tz, expr, late_start, end)
    assert late
    assert [i for i in early if int(i.rsplit(":", 1)[1]) > late_start] == late
    assert late == [f"tick:job:{s}" for s in chain(expr, tz, late_start, end)]

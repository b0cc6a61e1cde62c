"""rate_limit= and rate_key= in one process, on memory:// (tests/test_rate_limit_processes.py
holds the limit across real worker processes on every bundled broker)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from framework_m_core import App, JobContext, JobDefinitionError
from framework_m_core.adapters.memory import MemoryBroker, MemorySettings
from framework_m_core.cli import status
from framework_m_core.cli.main import main
from framework_m_core.control import keys
from framework_m_core.control.shared import shared
from framework_m_core.errors import ConfigurationError
from framework_m_core.ports import Capability
from framework_m_core.rates import Rate, parse_rate
from framework_m_core.runtime import rates
from framework_m_core.runtime.rates import Rates
from framework_m_core.testing import running_worker, wait_until

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("10/s", Rate(10, 1.0)),
        ("600/m", Rate(600, 60.0)),
        ("5/10s", Rate(5, 10.0)),
        ("1/h", Rate(1, 3600.0)),
        ("2/0.5s", Rate(2, 0.5)),
        (" 3/d ".replace("d", "12h"), Rate(3, 43_200.0)),
    ],
)
def test_a_rate_reads_starts_per_period(text: str, rate: Rate) -> None:
    assert parse_rate(text) == rate
    assert parse_rate(str(rate)) == rate


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("10", "a rate reads"),
        ("10/sec", "a rate reads"),
        ("ten/s", "a rate reads"),
        ("-1/s", "a rate reads"),
        ("0/s", "1 to 1000 starts"),
        ("1001/s", "1 to 1000 starts"),
        ("1/0.05s", "period is 0.1 s to 12 h"),
        ("1/d", "period is 0.1 s to 12 h"),
        (10, "a rate is a string"),
    ],
)
def test_a_bad_rate_is_refused_saying_why(text: object, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_rate(text)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"rate_limit": "10/x"}, "job 'job': rate_limit: a rate reads"),
        ({"rate_key": "tenant"}, "rate_key needs rate_limit="),
        ({"rate_limit": "1/s", "rate_key": "nope"}, "rate_key 'nope' is not a keyword argument"),
    ],
)
def test_bad_rates_are_refused_at_import(options: dict[str, object], says: str) -> None:
    app = App()
    with pytest.raises(JobDefinitionError, match=says):

        @app.job(**options)  # type: ignore[call-overload]
        async def job(ctx: JobContext, tenant: str = "") -> None: ...


async def _now(spending: Rates, key: str, rate: Rate) -> rates.Start | None:
    """A start logged at once, or None (the log is full; the request is withdrawn)."""
    asked = spending.ask(key, rate)
    await asked.seen.wait()
    if asked.done.done():
        return asked.done.result()
    asked.done.cancel()
    return None


def _most_in(starts: list[float], period: float) -> int:
    """The most starts any window of ``period`` seconds holds."""
    starts = sorted(starts)
    most, first = 0, 0
    for last, at in enumerate(starts):
        while at - starts[first] >= period:
            first += 1
        most = max(most, last - first + 1)
    return most


async def test_no_period_starts_more_than_the_rate_across_workers(queue_name: str) -> None:
    app = App()
    starts: list[float] = []
    ran: list[int] = []

    @app.job(rate_limit="4/0.5s")
    async def call_api(ctx: JobContext, n: int) -> None:
        starts.append(time.time())
        ran.append(n)
        assert ctx.attempt == 1

    settings = MemorySettings(queue_name, visibility_timeout=5.0)
    async with MemoryBroker(settings) as one, MemoryBroker(settings) as two:
        await one.sync_schema()
        for n in range(20):
            await one.enqueue("call_api", n=n)
        async with running_worker(app, one) as first, running_worker(app, two) as second:
            await wait_until(lambda: first.stats.waiting + second.stats.waiting > 0, what="waits")
            await wait_until(lambda: len(ran) == 20, timeout=15, what="every run")
    assert sorted(ran) == list(range(20))
    assert _most_in(starts, 0.5) <= 4
    assert max(starts) - min(starts) >= 4 * 0.5  # 20 starts need five periods
    assert first.stats.retried + second.stats.retried == 0


async def test_each_key_has_its_own_rate_and_waits_behind_no_other(memory: MemoryBroker) -> None:
    app = App()
    starts: dict[str, list[float]] = {"a": [], "b": []}

    @app.job(rate_limit="2/s", rate_key="tenant")
    async def export(ctx: JobContext, tenant: str) -> None:
        starts[tenant].append(time.time())

    async with running_worker(app, memory, concurrency=2) as worker:
        for _ in range(4):
            await memory.enqueue("export", tenant="a")
        await wait_until(lambda: worker.stats.waiting == 2, what="tenant a's runs waiting")
        began = time.time()
        await memory.enqueue("export", tenant="b")
        await memory.enqueue("export", tenant="b")
        await wait_until(lambda: len(starts["b"]) == 2, what="tenant b's two runs")
        assert max(starts["b"]) - began < 0.5  # not behind tenant a's queue
        await wait_until(lambda: len(starts["a"]) == 4, timeout=15, what="tenant a's runs")
    assert _most_in(starts["a"], 1.0) <= 2
    assert _most_in(starts["b"], 1.0) <= 2


async def test_a_start_sent_too_long_ago_is_logged_again_when_called(
    memory: MemoryBroker,
) -> None:
    spending = Rates(memory)
    key, rate = keys.rate("job", None, {}), Rate(2, 1.0)
    start = await spending.start(key, rate)
    assert spending.in_time(start)
    await asyncio.sleep(rates.MARGIN * 1.5)
    assert not spending.in_time(start)  # its start may leave the log before a period
    again = await spending.renew(start)
    assert spending.in_time(again)
    assert again.at > start.at
    logged = await shared(memory).read_starts(key)
    assert logged.starts == (again.at,)  # the old time taken out, not a second start
    other = await _now(spending, key, rate)
    assert other is not None
    assert await _now(spending, key, rate) is None  # two starts logged: full


async def test_starts_logged_at_once_are_renewed_one_by_one(memory: MemoryBroker) -> None:
    spending = Rates(memory)
    key, rate = keys.rate("job", None, {}), Rate(3, 1.0)
    first, second = await asyncio.gather(spending.start(key, rate), spending.start(key, rate))
    assert first.at == second.at  # one write logged both
    await asyncio.sleep(rates.MARGIN * 1.5)
    again = await spending.renew(first)
    logged = await shared(memory).read_starts(key)
    assert sorted(logged.starts) == [second.at, again.at]


async def test_a_log_that_does_not_read_as_one_is_written_anew(memory: MemoryBroker) -> None:
    key, rate = keys.rate("job", None, {}), Rate(1, 1.0)
    assert await shared(memory).put_memo(key, b"not a log nan", ttl=5.0)
    start = await _now(Rates(memory), key, rate)
    assert start is not None
    assert (await shared(memory).read_starts(key)).starts == (start.at,)


async def test_a_log_changed_by_another_worker_is_read_again(memory: MemoryBroker) -> None:
    one, two = Rates(memory), Rates(memory)
    key, rate = keys.rate("job", None, {}), Rate(2, 1.0)
    assert await _now(one, key, rate) is not None  # one remembers a log of one start
    assert await _now(two, key, rate) is not None  # two adds the second
    assert await _now(one, key, rate) is None  # one's write on its old log is refused: full


async def test_a_place_spent_is_never_given_back_before_its_period(memory: MemoryBroker) -> None:
    app, ran = App(), []

    @app.job(rate_limit="1/2s")
    async def once(ctx: JobContext) -> None:
        ran.append(time.time())

    async with running_worker(app, memory) as worker:
        await memory.enqueue("once")
        await memory.enqueue("once")
        await wait_until(lambda: len(ran) == 1 and worker.stats.waiting == 1, what="one waits")
        await wait_until(lambda: len(ran) == 2, timeout=10, what="the second start")
    assert ran[1] - ran[0] >= 2.0


class _NoLeases(MemoryBroker):
    capabilities = MemoryBroker.capabilities - {Capability.STORE}


async def test_a_rate_on_a_broker_without_leases_is_refused_at_start(queue_name: str) -> None:
    app = App()

    @app.job(rate_limit="5/s")
    async def call(ctx: JobContext) -> None: ...

    async with _NoLeases(MemorySettings(queue_name)) as broker:
        with pytest.raises(ConfigurationError, match=r"rate_limit= need \(jobs call\)"):
            async with running_worker(app, broker):
                pass


async def test_m_status_shows_the_starts_spent_under_a_rate(
    memory: MemoryBroker, queue_name: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    app = App()

    @app.job(rate_limit="3/m")
    async def call(ctx: JobContext) -> None: ...

    @app.job(rate_limit="3/m", rate_key="tenant")
    async def per_tenant(ctx: JobContext, tenant: str) -> None: ...

    key = keys.rate("call", None, {})
    now = time.time()
    assert await shared(memory).write_starts(key, [now - 61, now - 2, now], None, ttl=60.0)
    monkeypatch.setattr(status, "load_app", lambda _: app)
    url = f"memory://{queue_name}"
    assert await asyncio.to_thread(main, ["status", "--broker", url, "--app", "x", "--json"]) == 0
    rates_shown = json.loads(capsys.readouterr().out)["rates"]
    assert rates_shown == {"call": {"rate": "3/m", "spent": 2, "limit": 3}}  # no keyed one
    assert await asyncio.to_thread(main, ["status", "--broker", url, "--app", "x"]) == 0
    [row] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("rate ")]
    assert row.split() == ["rate", "call", "2", "of", "3", "starts", "spent", "(3/m)"]


async def test_runs_asking_in_one_pass_share_one_write(memory: MemoryBroker) -> None:
    spending = Rates(memory)
    key, rate = keys.rate("job", None, {}), Rate(3, 1.0)
    asked = [spending.ask(key, rate) for _ in range(5)]
    for one in asked:
        await one.seen.wait()
    started = [one.done.result() for one in asked[:3]]
    assert len({start.at for start in started}) == 1  # one write logged the three
    assert not any(one.done.done() for one in asked[3:])  # the log is full: they wait
    logged = await shared(memory).read_starts(key)
    assert logged.starts == (started[0].at,) * 3
    for one in asked[3:]:
        one.done.cancel()

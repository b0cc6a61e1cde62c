"""The names a fleet announces: merged by every worker, renewed daily, forgotten after
30 days unannounced, and checked by steering."""

from __future__ import annotations

import pytest

from framework_m_core import App, JobContext
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.control import fleet, keys, steering
from framework_m_core.control.shared import shared
from framework_m_core.errors import NotFoundError
from framework_m_core.testing import running_worker, wait_until

pytestmark = pytest.mark.anyio


async def version(broker: MemoryBroker) -> int | None:
    entry = await shared(broker).read_state(keys.ANNOUNCED)
    return None if entry is None else entry.version


async def test_replicas_of_two_apps_announce_the_union(memory: MemoryBroker) -> None:
    assert await fleet.announced(memory) is None
    assert await fleet.announce(memory, ["report", "mail"], ["report"])
    assert await fleet.announce(memory, ["export"], ["export"])
    found = await fleet.announced(memory)
    assert found is not None
    assert set(found.jobs) == {"report", "mail", "export"}
    assert set(found.schedules) == {"report", "export"}


async def test_a_name_announced_today_is_not_written_again(memory: MemoryBroker) -> None:
    await fleet.announce(memory, ["report"], ["report"])
    before = await version(memory)
    await fleet.announce(memory, ["report"], ["report"])
    assert await version(memory) == before


async def test_names_unannounced_for_30_days_drop_out(
    memory: MemoryBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = 1_800_000_000.0
    monkeypatch.setattr("framework_m_core.control.fleet.time.time", lambda: now)
    await fleet.announce(memory, ["retired", "report"], ["retired"])
    now += fleet.FORGET - 10
    await fleet.announce(memory, ["report"], [])  # renewed: a day passed
    now += 20
    await fleet.announce(memory, ["new"], [])
    found = await fleet.announced(memory)
    assert found is not None
    assert set(found.jobs) == {"report", "new"}
    assert set(found.schedules) == set()


async def test_a_malformed_record_is_none_and_rewritten(memory: MemoryBroker) -> None:
    await shared(memory).write_state(keys.ANNOUNCED, b'{"v": 1, "jobs": [1]}', version=None)
    assert await fleet.announced(memory) is None
    with pytest.raises(NotFoundError, match="no replica has ever run"):
        await steering.check_schedule(memory, "report")
    await fleet.announce(memory, ["report"], ["report"])
    assert await steering.check_schedule(memory, "report") is None


async def test_steering_checks_names_against_the_app_or_the_announced(
    memory: MemoryBroker,
) -> None:
    await fleet.announce(memory, ["report", "mail"], ["report"])
    with pytest.raises(NotFoundError, match=r"'mail' is no schedule of any replica announced"):
        await steering.check_schedule(memory, "mail")
    with pytest.raises(NotFoundError, match=r"'report' is no schedule of the app \(known: x\)"):
        await steering.check_schedule(memory, "report", {"x"})
    with pytest.raises(NotFoundError, match="there is no runtime schedule 'gone'"):
        await steering.check_schedule(memory, "@gone")
    with pytest.raises(NotFoundError, match="'mial' is no job any replica announced"):
        await steering.check_job(memory, "mial")
    await steering.check_job(memory, "mail")


async def test_a_worker_announces_its_app_as_it_starts(memory: MemoryBroker) -> None:
    app = App()

    @app.job(every=60)
    async def tick(ctx: JobContext) -> None: ...

    @app.job
    async def plain(ctx: JobContext) -> None: ...

    async def announced() -> bool:
        found = await fleet.announced(memory)
        return found is not None and set(found.jobs) == {"tick", "plain"}

    async with running_worker(app, memory):
        await wait_until(announced, timeout=10, what="the app announced")
    found = await fleet.announced(memory)
    assert found is not None
    assert set(found.schedules) == {"tick"}

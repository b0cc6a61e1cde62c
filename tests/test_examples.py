"""Every example in examples/ does what its docstring says (the FastAPI one has its own
test, test_fastapi_example.py; the SQLite adapter its contract suite)."""

from __future__ import annotations

import importlib
from datetime import UTC, datetime, timedelta
from types import ModuleType

import pytest

from framework_m_core import JobHandle
from framework_m_core.testing import run_job, ticks_between

from .conftest import REPO

pytestmark = pytest.mark.anyio


@pytest.fixture
def heartbeat(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(REPO))
    return importlib.import_module("examples.heartbeat")


async def test_the_heartbeat_schedules_tick_as_described(heartbeat: ModuleType) -> None:
    start = datetime(2027, 1, 4, 12, tzinfo=UTC)
    ticks = await ticks_between(heartbeat.app, start, start + timedelta(seconds=10))
    names = [t.job_name for t in ticks]
    assert names.count("every_second") == 11  # each second, both ends counted
    assert names.count("heartbeat") == 3  # every five seconds
    for tick in ticks:
        await run_job(heartbeat.app, tick.job_name, scheduled_at=tick.slot)


@pytest.mark.parametrize("name", ["every_second", "heartbeat", "nightly_report"])
async def test_a_scheduled_heartbeat_job_enqueued_by_hand_runs(
    heartbeat: ModuleType, name: str
) -> None:
    await run_job(heartbeat.app, name)  # no slot behind it: ctx.scheduled_at is None


async def test_send_email_is_a_handle_taking_its_kwargs(heartbeat: ModuleType) -> None:
    assert isinstance(heartbeat.send_email, JobHandle)
    await run_job(heartbeat.app, "send_email", to="a@example.com", subject="hi")

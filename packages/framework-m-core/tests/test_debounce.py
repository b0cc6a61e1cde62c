"""debounce=: enqueues within the quiet time collapse into one run, of the latest (the
process contract runs it on every broker)."""

from __future__ import annotations

import asyncio
import time

import pytest

from framework_m_core import App, ConfigurationError, JobContext, JobDefinitionError
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.control.jobs import job_status
from framework_m_core.ports.statuses import JobState
from framework_m_core.testing import running_worker, wait_until

pytestmark = pytest.mark.anyio


async def test_enqueues_in_the_quiet_time_run_once_with_the_latest_arguments(
    memory: MemoryBroker,
) -> None:
    app = App()
    runs: list[tuple[int, float]] = []

    @app.job(debounce=0.5)
    async def save_draft(ctx: JobContext, version: int) -> None:
        runs.append((version, time.time()))

    async with running_worker(app, memory) as worker:
        ids = []
        for version in range(10):
            ids.append(await save_draft.enqueue(memory, version=version))
            await asyncio.sleep(0.05)
        last = time.time()
        await wait_until(lambda: len(runs) == 1, timeout=5, what="the one run")
        await wait_until(lambda: worker.stats.skipped == 9, timeout=5, what="the others settled")
        assert len(runs) == 1
    version, started = runs[0]
    assert version == 9
    assert 0.5 - 0.06 <= started - last <= 1.5  # quiet time after the last enqueue
    assert (await job_status(memory, ids[-1])).state is JobState.SUCCEEDED
    earlier = await job_status(memory, ids[0])
    assert earlier.state is JobState.CANCELLED
    assert earlier.error == f"debounced: a later enqueue ({ids[-1]}) runs instead"


async def test_bursts_apart_run_once_each(memory: MemoryBroker) -> None:
    app, runs = App(), []

    @app.job(debounce=0.2)
    async def sync(ctx: JobContext, n: int) -> None:
        runs.append(n)

    async with running_worker(app, memory):
        for n in (1, 2):
            await sync.enqueue(memory, n=n)
        await wait_until(lambda: runs == [2], what="the first burst's run")
        for n in (3, 4):
            await sync.enqueue(memory, n=n)
        await wait_until(lambda: runs == [2, 4], what="the second burst's run")


async def test_an_enqueue_by_name_is_not_debounced(memory: MemoryBroker) -> None:
    app, runs = App(), []

    @app.job(debounce=5)
    async def sync(ctx: JobContext, n: int) -> None:
        runs.append(n)

    async with running_worker(app, memory):
        await sync.enqueue(memory, n=1)  # due in 5 s
        await memory.enqueue("sync", n=2)  # by name: no quiet time, not replaced
        await wait_until(lambda: runs == [2], what="the job enqueued by name")


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"debounce": 0}, "debounce must be 0.01 to 86400 seconds"),
        ({"debounce": float("nan")}, "debounce must be"),
        ({"debounce": 1, "unique": True}, "debounce and unique do not combine"),
    ],
)
def test_bad_debounce_options_are_refused_at_import(options: dict[str, object], says: str) -> None:
    app = App()
    with pytest.raises(JobDefinitionError, match=says):

        @app.job(**options)  # type: ignore[call-overload]
        async def job(ctx: JobContext) -> None: ...


async def test_a_debounced_job_is_refused_by_a_writer() -> None:
    app = App()

    @app.job(debounce=1)
    async def sync(ctx: JobContext) -> None: ...

    class Writer:
        async def write_job(self, message: object) -> str:
            raise AssertionError("not written")

    with pytest.raises(ConfigurationError, match="is debounced: it is enqueued on a broker"):
        await sync.enqueue(Writer())  # type: ignore[arg-type]

"""unique=: one job per key while one waits or runs (memory://; the process contract
frees a killed worker's key on every broker)."""

from __future__ import annotations

import asyncio

import pytest

from framework_m_core import App, ConfigurationError, JobContext, JobDefinitionError
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.control.jobs import job_status
from framework_m_core.control.shared import shared
from framework_m_core.control.unique import unique_key
from framework_m_core.ports.statuses import JobState
from framework_m_core.testing import running_worker, wait_until

pytestmark = pytest.mark.anyio


async def test_enqueues_while_it_runs_return_its_id_and_store_nothing(
    memory: MemoryBroker,
) -> None:
    app, go, ran = App(), asyncio.Event(), []

    @app.job(unique=True)
    async def reindex(ctx: JobContext, tenant: int) -> None:
        ran.append(ctx.job_id)
        await go.wait()

    first = await reindex.enqueue(memory, tenant=7)
    async with running_worker(app, memory) as worker:
        await wait_until(lambda: ran == [first], what="the first run")
        again = [await reindex.enqueue(memory, tenant=7) for _ in range(50)]
        assert set(again) == {first}
        status = await again[0].status()  # queued, or running once its status was noted
        assert status.state in (JobState.QUEUED, JobState.RUNNING)
        other = await reindex.enqueue(memory, tenant=8)  # another key
        assert other != first
        go.set()
        await wait_until(lambda: worker.stats.succeeded == 2, what="both runs")
        after = await reindex.enqueue(memory, tenant=7)  # settled: the key is free
        assert after != first
        await wait_until(lambda: worker.stats.succeeded == 3, what="the run after")
    assert sorted(ran) == sorted([first, other, after])


async def test_enqueues_while_it_waits_return_its_id_and_it_runs_once(
    memory: MemoryBroker,
) -> None:
    app, ran = App(), []

    @app.job(unique=("tenant",))
    async def export(ctx: JobContext, tenant: str, fmt: str = "csv") -> None:
        ran.append((tenant, fmt))

    ids = [await export.enqueue(memory, tenant="a", fmt=f) for f in ("csv", "json", "xml")]
    assert len(set(ids)) == 1  # the named kwarg alone makes the key
    assert (await job_status(memory, ids[0])).state is JobState.QUEUED
    async with running_worker(app, memory) as worker:
        await wait_until(lambda: worker.stats.succeeded == 1, what="the one run")
    assert ran == [("a", "csv")]
    key = unique_key(export.spec, {"tenant": "a"})
    assert await shared(memory).lease_holders(key) == []  # given back when it settled


async def test_a_retried_job_keeps_its_key_until_it_settles(memory: MemoryBroker) -> None:
    app, tries = App(backoff=0.5), []

    @app.job(unique=True, max_attempts=2)
    async def flaky(ctx: JobContext) -> None:
        tries.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("first try fails")

    first = await flaky.enqueue(memory)
    async with running_worker(app, memory) as worker:
        await wait_until(lambda: worker.stats.retried == 1, what="the retry")
        assert await flaky.enqueue(memory) == first  # waiting for its retry: held
        await wait_until(lambda: worker.stats.succeeded == 1, what="the second attempt")
    assert tries == [1, 2]
    assert await flaky.enqueue(memory) != first


async def test_a_job_cancelled_before_it_ran_frees_its_key(memory: MemoryBroker) -> None:
    app = App()

    @app.job(unique=True)
    async def once(ctx: JobContext) -> None: ...

    first = await once.enqueue(memory)
    assert await first.cancel()
    async with running_worker(app, memory) as worker:
        await wait_until(lambda: worker.stats.cancelled == 1, what="the cancelled job settled")
        assert await shared(memory).lease_holders(unique_key(once.spec, {})) == []
    assert await once.enqueue(memory) != first


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"unique": ("nope",)}, "unique 'nope' is not a keyword argument"),
        ({"unique": "tenant"}, "unique must be True"),
        ({"unique": True, "unique_for": 0}, "unique_for must be 1 to 86400 seconds"),
    ],
)
def test_bad_unique_options_are_refused_at_import(options: dict[str, object], says: str) -> None:
    app = App()
    with pytest.raises(JobDefinitionError, match=says):

        @app.job(**options)  # type: ignore[call-overload]
        async def job(ctx: JobContext, tenant: str = "") -> None: ...


async def test_a_unique_job_is_refused_by_a_writer_without_leases() -> None:
    app = App()

    @app.job(unique=True)
    async def once(ctx: JobContext) -> None: ...

    class Writer:
        async def write_job(self, message: object) -> str:
            raise AssertionError("not written")

    with pytest.raises(ConfigurationError, match="is unique: it is enqueued on a broker"):
        await once.enqueue(Writer())  # type: ignore[arg-type]

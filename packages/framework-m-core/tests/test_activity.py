"""The jobs by state a fleet keeps for operators: the runs going on (with replica and
how long), the latest settled deliveries and failed attempts; bounded, and written off
the jobs' path."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from framework_m_core import App, JobContext
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.control import activity, keys, settled
from framework_m_core.control.activity import add_finished, finished_jobs
from framework_m_core.control.checks import MAX_STATE_VALUE
from framework_m_core.control.settled import SettledRun
from framework_m_core.control.shared import shared
from framework_m_core.testing import running_worker, wait_until
from framework_m_core.tracking.lists import jobs_in_state

pytestmark = pytest.mark.anyio


async def test_a_run_is_listed_while_it_goes_on_then_as_finished(memory: MemoryBroker) -> None:
    app = App(backoff=0.01)
    release = asyncio.Event()

    @app.job
    async def held(ctx: JobContext, n: int) -> int:
        await release.wait()
        return n

    @app.job(max_attempts=2)
    async def broken(ctx: JobContext) -> None:
        raise ValueError("no disk")

    ids = [await memory.enqueue("held", n=n) for n in range(3)]
    async with running_worker(app, memory) as worker:
        assert worker.heartbeat is not None
        replica = worker.heartbeat.id
        running: list[dict[str, object]] = []

        async def listed() -> bool:
            running[:] = (await jobs_in_state(memory, "running"))[0]
            return len(running) == 3

        deadline = time.monotonic() + 5
        while not await listed():
            assert time.monotonic() < deadline, running
            await asyncio.sleep(0.05)
        assert {r["job_id"] for r in running} == set(ids)
        assert {r["replica"] for r in running} == {replica}
        assert all(r["job"] == "held" and r["attempt"] == 1 for r in running)
        assert (await jobs_in_state(memory, "running", "broken"))[0] == []
        await memory.enqueue("broken")
        await wait_until(lambda: worker.stats.dead_lettered == 1)
        release.set()
        await wait_until(lambda: worker.stats.succeeded == 3)
        deadline = time.monotonic() + 5
        while (await jobs_in_state(memory, "running"))[0]:  # gone while the worker runs on
            assert time.monotonic() < deadline, "ended runs still listed as running"
            await asyncio.sleep(0.05)
    # the worker's stop wrote its last records: no run, every settled delivery
    assert (await jobs_in_state(memory, "running"))[0] == []
    finished, total = await jobs_in_state(memory, "finished")
    assert total == 3
    assert {f["job_id"] for f in finished} == set(ids)
    assert {f["outcome"] for f in finished} == {"succeeded"}
    assert all(isinstance(f["duration"], float) for f in finished)
    failed = (await jobs_in_state(memory, "failed"))[0]
    assert [(f["outcome"], f["attempt"]) for f in failed] == [("dead_lettered", 2), ("retried", 1)]
    assert "ValueError: no disk" in str(failed[0]["error"])
    dead = (await jobs_in_state(memory, "dead", "broken"))[0]
    assert len(dead) == 1
    assert dead[0]["attempts"] == 2


async def test_a_long_run_stays_listed_past_its_record_s_ttl(
    memory: MemoryBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    from framework_m_core.runtime import activity as worker_side

    monkeypatch.setattr(activity, "RUNS_TTL", 0.6)
    monkeypatch.setattr(worker_side, "RENEW", 0.2)
    app = App()
    release = asyncio.Event()

    @app.job
    async def held(ctx: JobContext) -> None:
        await release.wait()

    job_id = await memory.enqueue("held")
    async with running_worker(app, memory):
        deadline = time.monotonic() + 5
        while not (await jobs_in_state(memory, "running"))[0]:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        for _ in range(3):  # past the ttl, three times over: renewed meanwhile
            await asyncio.sleep(0.6)
            listed = (await jobs_in_state(memory, "running"))[0]
            assert [r["job_id"] for r in listed] == [job_id]
        release.set()


async def test_the_runs_of_a_replica_that_stopped_writing_drop_out(
    memory: MemoryBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(activity, "RUNS_TTL", 0.3)
    monkeypatch.setattr(activity, "list_replicas", _one_replica)
    run = activity.RunningJob("j1", "held", 1, time.time(), None, "gone:1:abcdef")
    await activity.put_running(memory, "gone:1:abcdef", [run])
    assert [r.job_id for r in (await activity.running_jobs(memory))[0]] == ["j1"]
    await asyncio.sleep(0.5)  # past its ttl, not renewed
    assert (await activity.running_jobs(memory))[0] == []


async def _one_replica(broker: object) -> list[object]:
    class _Replica:
        id = "gone:1:abcdef"

    return [_Replica()]


def _done(n: int, error: str | None = None) -> SettledRun:
    now = time.time()
    return SettledRun(f"id{n}", "job", "r:1:aaaaaa", 1, "succeeded", now - 1, now + n, error)


async def test_the_finished_records_keep_the_latest_and_fit_a_state_record(
    memory: MemoryBroker,
) -> None:
    assert await add_finished(memory, "r:1:aaaaaa", [_done(n) for n in range(100)])
    kept = await finished_jobs(memory, failed=False)
    assert len(kept) == activity.MOST_FINISHED
    assert kept[0].job_id == "id99"
    wordy = [_done(200 + n, "x" * 1000) for n in range(activity.MOST_FINISHED)]
    assert await add_finished(memory, "r:1:aaaaaa", wordy)
    record = await shared(memory).read_state(keys.finished_bucket("r:1:aaaaaa"))
    assert record is not None
    assert len(record.value) <= MAX_STATE_VALUE
    kept = await finished_jobs(memory, failed=False)
    assert kept[0].job_id == f"id{199 + activity.MOST_FINISHED}"  # the newest stay
    assert all(len(k.error or "") <= settled.MAX_ERROR for k in kept)


async def test_a_record_not_written_here_is_read_as_far_as_it_is_valid(
    memory: MemoryBroker, caplog: pytest.LogCaptureFixture
) -> None:
    good = {"job_id": "a", "job": "j", "replica": "r", "attempt": 1, "outcome": "succeeded",
            "started_at": None, "finished_at": time.time(), "error": None}  # fmt: skip
    bad = [{**good, "outcome": "?"}, {**good, "finished_at": "now"}, 7]
    value = json.dumps({"v": 1, "runs": [good, *bad]}).encode()
    await shared(memory).write_state(keys.finished_buckets()[3], value, version=None)
    assert [r.job_id for r in await finished_jobs(memory, failed=False)] == ["a"]
    assert "3 malformed entries left out" in caplog.text

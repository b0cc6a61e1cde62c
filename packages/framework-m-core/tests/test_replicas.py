"""The replica roll: workers list themselves in the broker, renew, drop out when quiet."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time

import pytest

from framework_m_core import App, JobContext, Ticker
from framework_m_core.adapters.memory import MemoryBroker
from framework_m_core.control import replicas
from framework_m_core.control.replicas import RollEntry, list_replicas
from framework_m_core.control.shared import shared
from framework_m_core.testing import running_worker, wait_until

pytestmark = pytest.mark.anyio


def _app(started: asyncio.Event | None = None) -> App:
    app = App()

    @app.job
    async def slow(ctx: JobContext) -> None:
        if started is not None:
            started.set()
        await asyncio.sleep(30)

    @app.job(every=3600)
    async def hourly(ctx: JobContext) -> None: ...

    return app


async def test_running_workers_are_listed_with_what_they_do_and_leave_when_stopped(
    memory: MemoryBroker,
) -> None:
    started = asyncio.Event()
    app = _app(started)
    ticker = Ticker(app.jobs.values(), memory, grace=2)
    quick = {"shutdown_timeout": 0.2}
    async with running_worker(app, memory, ticker=ticker, concurrency=3, **quick) as ticking:
        async with running_worker(app, memory, **quick) as pool:
            assert ticking.heartbeat is not None
            assert pool.heartbeat is not None
            beats = (ticking.heartbeat, pool.heartbeat)
            await wait_until(lambda: all(b.beats for b in beats), timeout=5)
            listed = {r.id: r for r in await list_replicas(memory)}
            assert set(listed) == {ticking.heartbeat.id, pool.heartbeat.id}
            mine = listed[ticking.heartbeat.id]
            assert (mine.pid, mine.ticking, mine.concurrency) == (os.getpid(), True, 3)
            assert listed[pool.heartbeat.id].ticking is False
            assert time.time() - 5 < mine.seen_at <= time.time()
            await memory.enqueue("slow")
            await asyncio.wait_for(started.wait(), 10)
            for beat in beats:
                await beat.beat()  # what a beat says now
            assert sum(r.running for r in await list_replicas(memory)) == 1
        assert [r.id for r in await list_replicas(memory)] == [ticking.heartbeat.id]
    assert await list_replicas(memory) == []


async def test_a_replica_not_renewed_drops_out_and_is_forgotten(memory: MemoryBroker) -> None:
    quiet = RollEntry(memory, lambda: (True, 0, {}, {}), concurrency=1)
    await quiet.beat()
    now = time.time()
    assert [r.id for r in await list_replicas(memory, now)] == [quiet.id]
    assert await list_replicas(memory, now + replicas.QUIET + 1) == []  # gone quiet
    other = RollEntry(memory, lambda: (False, 0, {}, {}), concurrency=1)
    other.key = quiet.key  # the same bucket
    entries = json.loads((await shared(memory).read_state(quiet.key)).value)["replicas"]  # type: ignore[union-attr]
    entries[quiet.id]["seen_at"] = now - replicas.FORGET - 1
    record = await shared(memory).read_state(quiet.key)
    assert record is not None
    value = json.dumps({"replicas": entries}).encode()
    assert await shared(memory).write_state(quiet.key, value, version=record.version)
    await other.beat()  # the next writer of the bucket drops the forgotten entry
    stored = json.loads((await shared(memory).read_state(quiet.key)).value)["replicas"]  # type: ignore[union-attr]
    assert set(stored) == {other.id}


async def test_beats_of_many_replicas_at_once_lose_none(memory: MemoryBroker) -> None:
    beats = [RollEntry(memory, lambda: (False, 0, {}, {}), concurrency=1) for _ in range(24)]
    for beat in beats[:8]:
        beat.key = beats[0].key  # eight racing on one bucket
    await asyncio.gather(*(b.beat() for b in beats))
    assert {r.id for r in await list_replicas(memory)} == {b.id for b in beats}


async def test_records_that_are_no_roll_are_read_as_empty_and_said(
    memory: MemoryBroker, caplog: pytest.LogCaptureFixture
) -> None:
    good = RollEntry(memory, lambda: (True, 2, {"succeeded": 3}, {}), concurrency=4)
    await good.beat()
    record = await shared(memory).read_state(good.key)
    assert record is not None
    entries = json.loads(record.value)["replicas"]
    entries["forged"] = {**entries[good.id], "pid": "1; rm -rf /"}
    entries["partial"] = {"host": "h"}
    value = json.dumps({"replicas": entries}).encode()
    assert await shared(memory).write_state(good.key, value, version=record.version)
    other = "replicas:0" if good.key != "replicas:0" else "replicas:1"
    assert await shared(memory).write_state(other, b"not json", version=None)
    with caplog.at_level(logging.WARNING, logger="framework_m.worker"):
        assert [r.id for r in await list_replicas(memory)] == [good.id]
    said = caplog.text
    assert "'forged' is not a replica" in said
    assert "'partial' is not a replica" in said
    assert f"{other} is not a replica roll" in said
    await good.beat()  # a renewal over a record it cannot read starts it anew
    [listed] = await list_replicas(memory)
    assert (listed.id, dict(listed.counts)) == (good.id, {"succeeded": 3})
    record = await shared(memory).read_state(good.key)
    assert record is not None
    entries = json.loads(record.value)["replicas"]
    entries[good.id]["counts"] = {"succeeded": "many", "retried": 2, "failed": -1}
    value = json.dumps({"replicas": entries}).encode()
    assert await shared(memory).write_state(good.key, value, version=record.version)
    [listed] = await list_replicas(memory)
    assert dict(listed.counts) == {"retried": 2}  # what is not a count is left out


async def test_a_worker_with_heartbeat_0_is_not_listed(memory: MemoryBroker) -> None:
    async with running_worker(_app(), memory, heartbeat=0) as worker:
        assert worker.heartbeat is None
        assert await list_replicas(memory) == []


async def test_the_latest_outbox_count_among_the_replicas_is_the_one_shown(
    memory: MemoryBroker,
) -> None:
    plain = RollEntry(memory, lambda: (True, 0, {}, {}), concurrency=1)
    old = RollEntry(
        memory, lambda: (True, 0, {}, {"rows": 5, "oldest": 2.0, "seen_at": 100.0}), concurrency=1
    )
    new = RollEntry(
        memory,
        lambda: (False, 0, {}, {"rows": 3, "oldest": 1.5, "failing": 1, "seen_at": 200.0}),
        concurrency=1,
    )
    assert replicas.outbox_seen(await list_replicas(memory)) is None
    for entry in (plain, old, new):
        await entry.beat()
    found = await list_replicas(memory)
    assert {r.id: dict(r.outbox) for r in found}[plain.id] == {}
    assert replicas.outbox_seen(found) == replicas.OutboxSeen(3, 1.5, 1, 200.0, new.id)
    record = await shared(memory).read_state(new.key)
    assert record is not None
    entries = json.loads(record.value)["replicas"]
    entries[new.id]["outbox"] = {"rows": "many", "oldest": -1, "seen_at": 300.0}
    value = json.dumps({"replicas": entries}).encode()
    assert await shared(memory).write_state(new.key, value, version=record.version)
    [listed] = [r for r in await list_replicas(memory) if r.id == new.id]
    assert dict(listed.outbox) == {"seen_at": 300.0}  # what is not a number >= 0 is left out

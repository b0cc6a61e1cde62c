"""Redis rows: the raw redis-py ceiling (our Lua script) and the peers arq, taskiq-redis, saq."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from common import (
    BODY,
    StartMark,
    in_batches,
    latencies,
    sends_per_second,
    taskiq_drain,
    taskiq_latency,
)

from framework_m_redis.scripts import ENQUEUE

# The script's arguments after job id and body: window ms, max length, has a dedup id,
# no not_after, no due time (what the adapter passes for a job enqueued with a dedup id).
_ARGS = [120000, 10**9, "1", "", ""]


async def _cleanup(client: aioredis.Redis, pattern: str) -> None:
    keys = [k async for k in client.scan_iter(match=pattern, count=1000)]
    for i in range(0, len(keys), 1000):
        await client.delete(*keys[i : i + 1000])


async def raw_lua(server: str, n: int, inflight: int) -> float:
    """The adapter's own SET NX + XADD script called straight through redis-py."""
    tag = uuid.uuid4().hex[:12]
    client = aioredis.Redis.from_url(server)
    script = client.register_script(ENQUEUE)
    stream, delayed = f"bench:{{{tag}}}:jobs", f"bench:{{{tag}}}:delayed"

    async def one(i: int) -> None:
        await script(keys=[stream, f"bench:{{{tag}}}:d:{i}", delayed], args=[str(i), BODY, *_ARGS])

    try:
        await one(-1)  # load the script
        return await sends_per_second(one, n, inflight)
    finally:
        await _cleanup(client, f"bench:{{{tag}}}:*")
        await client.aclose()


async def raw_lua_pipelined(server: str, n: int, batch: int = 100) -> float:
    """The same script, 100 calls per pipeline round trip."""
    tag = uuid.uuid4().hex[:12]
    client = aioredis.Redis.from_url(server)
    script = client.register_script(ENQUEUE)
    stream, delayed = f"bench:{{{tag}}}:jobs", f"bench:{{{tag}}}:delayed"
    try:
        await script(keys=[stream, f"bench:{{{tag}}}:d:-1", delayed], args=["-1", BODY, *_ARGS])
        t0 = time.perf_counter()
        for start in range(0, n, batch):
            pipe = client.pipeline(transaction=False)
            for i in range(start, min(n, start + batch)):
                await script(
                    keys=[stream, f"bench:{{{tag}}}:d:{i}", delayed],
                    args=[str(i), BODY, *_ARGS],
                    client=pipe,
                )
            await pipe.execute()
        return n / (time.perf_counter() - t0)
    finally:
        await _cleanup(client, f"bench:{{{tag}}}:*")
        await client.aclose()


async def arq_drain(server: str, n: int) -> float:
    """arq, 50 jobs at once (max_jobs), burst mode."""
    from arq import create_pool
    from arq.connections import RedisSettings
    from arq.worker import Worker, func

    queue = f"bench:arq:{uuid.uuid4().hex[:12]}"
    settings = RedisSettings.from_dsn(server)
    pool = await create_pool(settings)

    async def noop(ctx: dict[str, object], i: int) -> None: ...

    try:
        await in_batches(lambda i: pool.enqueue_job("noop", i, _queue_name=queue), n)
        worker = Worker(
            functions=[func(noop, name="noop")],
            redis_pool=pool,
            queue_name=queue,
            max_jobs=50,
            burst=True,
            poll_delay=0.01,
            handle_signals=False,
            keep_result=0,
        )
        t0 = time.perf_counter()
        await worker.main()
        elapsed = time.perf_counter() - t0
        assert worker.jobs_complete == n, worker.jobs_complete
        return n / elapsed
    finally:
        await _cleanup(pool, "arq:*")
        await pool.delete(queue)
        await pool.aclose()


@contextlib.asynccontextmanager
async def _taskiq_redis(server: str) -> AsyncIterator[Any]:
    """taskiq-redis's Redis Streams broker; its stream deleted after."""
    from taskiq_redis import RedisStreamBroker

    tag = uuid.uuid4().hex[:12]
    broker = RedisStreamBroker(server, queue_name=f"bench_taskiq_{tag}", xread_block=200)
    try:
        yield broker
    finally:
        client = aioredis.Redis.from_url(server)
        await client.delete(f"bench_taskiq_{tag}")
        await client.aclose()
        await broker.shutdown()


async def taskiq_redis_drain(server: str, n: int) -> float:
    """taskiq-redis, 50 tasks at once."""
    async with _taskiq_redis(server) as broker:
        return await taskiq_drain(broker, n)


async def taskiq_redis_latency(server: str, samples: int) -> list[float]:
    async with _taskiq_redis(server) as broker:
        return await taskiq_latency(broker, samples)


@contextlib.asynccontextmanager
async def _saq_worker(server: str, handler: Any) -> AsyncIterator[Any]:
    """A connected saq queue and its worker (concurrency 50) running ``handler`` as ``noop``
    while the block runs; the worker stopped and the queue's keys deleted after."""
    from saq import Queue, Worker

    queue = Queue.from_url(server, name=f"bench_saq_{uuid.uuid4().hex[:12]}")
    await queue.connect()
    worker = Worker(queue, functions=[("noop", handler)], concurrency=50)
    running: list[asyncio.Task[None]] = []
    try:
        yield queue, lambda: running.append(asyncio.create_task(worker.start()))
    finally:
        await worker.stop()
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await _cleanup(queue.redis, f"saq:{queue.name}:*")
        await queue.disconnect()


async def saq_drain(server: str, n: int) -> float:
    """saq, concurrency 50."""
    done = asyncio.Event()
    ran = 0

    async def noop(ctx: object, *, i: int) -> None:
        nonlocal ran
        ran += 1
        if ran == n:
            done.set()

    async with _saq_worker(server, noop) as (queue, start):
        await in_batches(lambda i: queue.enqueue("noop", i=i), n)
        t0 = time.perf_counter()
        start()
        await done.wait()
        return n / (time.perf_counter() - t0)


async def saq_latency(server: str, samples: int) -> list[float]:
    mark = StartMark()

    async def noop(ctx: object) -> None:
        mark.set()

    async with _saq_worker(server, noop) as (queue, start):
        start()
        return await latencies(lambda: queue.enqueue("noop"), mark, samples)


async def arq_latency(server: str, samples: int) -> list[float]:
    """:func:`latencies` of an arq worker (max_jobs 50, polling every 10 ms as above)."""
    from arq import create_pool
    from arq.connections import RedisSettings
    from arq.worker import Worker, func

    queue = f"bench:arq:{uuid.uuid4().hex[:12]}"
    pool = await create_pool(RedisSettings.from_dsn(server))
    mark = StartMark()

    async def noop(ctx: dict[str, object]) -> None:
        mark.set()

    worker = Worker(
        functions=[func(noop, name="noop")],
        redis_pool=pool,
        queue_name=queue,
        max_jobs=50,
        poll_delay=0.01,
        handle_signals=False,
        keep_result=0,
    )
    task = asyncio.create_task(worker.main())
    try:
        return await latencies(lambda: pool.enqueue_job("noop", _queue_name=queue), mark, samples)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await _cleanup(pool, "arq:*")
        await pool.delete(queue)
        await pool.aclose()


async def _in_arq_env(what: str, server: str, n: int) -> str:
    """Run ``what`` (drain or latency) in the ``bench-arq`` environment (arq needs redis<6);
    its printed result."""
    hatch = shutil.which("hatch")
    if hatch is None:
        raise RuntimeError("hatch is not on PATH: run the benchmarks with `hatch run bench:run`")
    proc = await asyncio.create_subprocess_exec(
        *(hatch, "run", "bench-arq:python", str(Path(__file__)), what, server, str(n)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await proc.communicate()
    except asyncio.CancelledError:  # the run's deadline or Ctrl-C: no stray process
        proc.kill()
        await proc.wait()
        raise
    if proc.returncode != 0:
        last = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"arq {what} failed with exit code {proc.returncode}: {last[0]}")
    return out.decode().strip().splitlines()[-1]


async def arq_drain_in_its_env(server: str, n: int) -> float:
    """:func:`arq_drain` in the ``bench-arq`` environment."""
    return float(await _in_arq_env("drain", server, n))


async def arq_latency_in_its_env(server: str, samples: int) -> list[float]:
    """:func:`arq_latency` in the ``bench-arq`` environment."""
    return [float(x) for x in json.loads(await _in_arq_env("latency", server, samples))]


async def raw_consume(server: str, n: int, batch: int = 50) -> float:
    """The consume ceiling: redis-py reading ``batch`` entries at a time with XREADGROUP and
    settling each on its own with XACK and XDEL (no handler); the worker's acks of one
    event-loop pass share a script call, so it can pass this ceiling."""
    tag = uuid.uuid4().hex[:12]
    client = aioredis.Redis.from_url(server)
    stream, group = f"bench:{{{tag}}}:jobs", "workers"
    try:
        await client.xgroup_create(stream, group, id="0", mkstream=True)
        for start in range(0, n, 500):
            pipe = client.pipeline(transaction=False)
            for _ in range(start, min(n, start + 500)):
                pipe.xadd(stream, {"b": BODY, "a": "0"})
            await pipe.execute()

        async def settle(entry_id: bytes) -> None:
            await client.xack(stream, group, entry_id)
            await client.xdel(stream, entry_id)

        done = 0
        t0 = time.perf_counter()
        while done < n:
            reply = await client.xreadgroup(group, "c1", {stream: ">"}, count=batch, block=1000)
            entries = [eid for _, got in reply or [] for eid, _ in got]
            await asyncio.gather(*(settle(eid) for eid in entries))
            done += len(entries)
        return n / (time.perf_counter() - t0)
    finally:
        await _cleanup(client, f"bench:{{{tag}}}:*")
        await client.aclose()


if __name__ == "__main__":  # the arq rows, in the bench-arq environment
    what, url, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if what == "drain":
        print(asyncio.run(arq_drain(url, count)))
    else:
        print(json.dumps(asyncio.run(arq_latency(url, count))))

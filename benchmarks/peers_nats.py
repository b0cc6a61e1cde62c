"""NATS rows: the raw nats-py ceiling and the taskiq-nats peer."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import nats
from common import BODY, sends_per_second, taskiq_drain, taskiq_latency
from nats.js.api import StreamConfig


async def raw_publish(server: str, n: int, inflight: int) -> float:
    """JetStream publishes with unique Nats-Msg-Id headers, straight through nats-py."""
    tag = uuid.uuid4().hex[:12]
    nc = await nats.connect(server)
    js = nc.jetstream()
    stream = f"bench_raw_{tag}"
    await js.add_stream(StreamConfig(name=stream, subjects=[stream], duplicate_window=120))

    async def one(i: int) -> None:
        await js.publish(stream, BODY, headers={"Nats-Msg-Id": f"{tag}:{i}"})

    try:
        return await sends_per_second(one, n, inflight)
    finally:
        await js.delete_stream(stream)
        await nc.close()


@contextlib.asynccontextmanager
async def _taskiq_nats(server: str) -> AsyncIterator[Any]:
    """taskiq-nats's pull-based JetStream broker, batches of 50; its stream deleted after."""
    from taskiq_nats import PullBasedJetStreamBroker

    tag = uuid.uuid4().hex[:12]
    broker = PullBasedJetStreamBroker(
        servers=[server],
        subject=f"bench_taskiq_{tag}",
        stream_name=f"bench_taskiq_{tag}",
        durable=f"bench_taskiq_{tag}",
        pull_consume_batch=50,
        pull_consume_timeout=0.2,
    )
    try:
        yield broker
    finally:
        await broker.js.delete_stream(f"bench_taskiq_{tag}")
        await broker.shutdown()


async def taskiq_nats_drain(server: str, n: int) -> float:
    """taskiq-nats, 50 tasks at once."""
    async with _taskiq_nats(server) as broker:
        return await taskiq_drain(broker, n)


async def taskiq_nats_latency(server: str, samples: int) -> list[float]:
    async with _taskiq_nats(server) as broker:
        return await taskiq_latency(broker, samples)


async def raw_consume(server: str, n: int, batch: int = 50) -> float:
    """The consume ceiling: nats-py pull-fetching ``batch`` at a time from a durable
    consumer and acking each message on its own, as the worker does (no handler)."""
    tag = uuid.uuid4().hex[:12]
    nc = await nats.connect(server)
    js = nc.jetstream()
    stream = f"bench_rawc_{tag}"
    await js.add_stream(StreamConfig(name=stream, subjects=[stream]))
    try:
        for start in range(0, n, 500):
            await asyncio.gather(
                *(js.publish(stream, BODY) for _ in range(start, min(n, start + 500)))
            )
        psub = await js.pull_subscribe(stream, durable=f"{stream}_c")
        done = 0
        t0 = time.perf_counter()
        while done < n:
            msgs = await psub.fetch(batch, timeout=5)
            await asyncio.gather(*(m.ack() for m in msgs))
            done += len(msgs)
        return n / (time.perf_counter() - t0)
    finally:
        await js.delete_stream(stream)
        await nc.close()

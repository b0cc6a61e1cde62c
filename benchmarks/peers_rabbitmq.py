"""RabbitMQ rows: the raw aio-pika ceiling and the taskiq-aio-pika peer."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aio_pika
from aio_pika.abc import AbstractExchange
from common import BODY, sends_per_second, taskiq_drain, taskiq_latency


@contextlib.asynccontextmanager
async def dedup_exchange(
    server: str, size: int, ttl_ms: int, persistence: str, **queue: Any
) -> AsyncIterator[tuple[AbstractExchange, str]]:
    """A confirming channel's x-message-deduplication exchange bound to one queue (declared
    with ``queue`` keywords), and a tag for unique ids; both deleted afterwards."""
    tag = uuid.uuid4().hex[:12]
    connection = await aio_pika.connect(server)
    channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
    exchange = await channel.declare_exchange(
        f"bench_dedup_{tag}",
        "x-message-deduplication",
        durable=True,
        arguments={
            "x-cache-size": size,
            "x-cache-ttl": ttl_ms,
            "x-cache-persistence": persistence,
        },
    )
    bound = await channel.declare_queue(f"bench_dedup_{tag}", **queue)
    await bound.bind(exchange)
    try:
        yield exchange, tag
    finally:
        await bound.delete(if_unused=False, if_empty=False)
        await exchange.delete()
        await connection.close()


async def raw_publish(server: str, n: int, inflight: int, persistence: str = "disk") -> float:
    """Confirmed, persistent, mandatory publishes with unique deduplication headers through
    an x-message-deduplication exchange (framework-m's arguments) into a quorum queue."""
    quorum = {"durable": True, "arguments": {"x-queue-type": "quorum"}}
    async with dedup_exchange(server, 1_000_000, 120_000, persistence, **quorum) as (x, tag):

        async def one(i: int) -> None:
            await x.publish(
                aio_pika.Message(
                    BODY,
                    headers={"x-deduplication-header": f"{tag}:{i}"},
                    delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                ),
                routing_key="",
                mandatory=True,
            )

        return await sends_per_second(one, n, inflight)


@contextlib.asynccontextmanager
async def _taskiq_aio_pika(server: str) -> AsyncIterator[Any]:
    """taskiq-aio-pika (quorum queue, prefetch 100 like framework-m); its queues and
    exchange deleted after."""
    from taskiq_aio_pika import AioPikaBroker, Exchange, Queue

    name = f"bench_taskiq_{uuid.uuid4().hex[:12]}"
    broker = AioPikaBroker(
        server,
        qos=100,
        exchange=Exchange(name=name),
        task_queues=[Queue(name=name)],
        dead_letter_queue=Queue(name=f"{name}.dead"),
    )
    broker.is_worker_process = True  # or it opens no connection to consume on
    try:
        yield broker
    finally:
        await broker.shutdown()
        connection = await aio_pika.connect(server)
        channel = await connection.channel()
        for queue in (name, f"{name}.dead"):
            await channel.queue_delete(queue)
        await channel.exchange_delete(name)
        await connection.close()


async def taskiq_aio_pika_drain(server: str, n: int) -> float:
    """taskiq-aio-pika, 50 tasks at once."""
    async with _taskiq_aio_pika(server) as broker:
        return await taskiq_drain(broker, n)


async def taskiq_aio_pika_latency(server: str, samples: int) -> list[float]:
    async with _taskiq_aio_pika(server) as broker:
        return await taskiq_latency(broker, samples)


async def raw_consume(server: str, n: int, prefetch: int = 100) -> float:
    """The consume ceiling: aio-pika's basic.consume from a quorum queue with the worker's
    prefetch, acking each message on its own (no handler)."""
    tag = uuid.uuid4().hex[:12]
    connection = await aio_pika.connect(server)
    try:
        channel = await connection.channel()  # confirmed publishes: all queued before timing
        await channel.set_qos(prefetch_count=prefetch)
        queue = await channel.declare_queue(
            f"bench_rawc_{tag}", durable=True, arguments={"x-queue-type": "quorum"}
        )
        for start in range(0, n, 500):
            await asyncio.gather(
                *(
                    channel.default_exchange.publish(
                        aio_pika.Message(BODY, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                        routing_key=queue.name,
                    )
                    for _ in range(start, min(n, start + 500))
                )
            )
        done, finished = 0, asyncio.Event()

        async def on_message(message: Any) -> None:
            nonlocal done
            await message.ack()
            done += 1
            if done == n:
                finished.set()

        t0 = time.perf_counter()
        tag_ = await queue.consume(on_message)
        await finished.wait()
        elapsed = time.perf_counter() - t0
        await queue.cancel(tag_)
        await queue.delete(if_unused=False, if_empty=False)
        return n / elapsed
    finally:
        await connection.close()

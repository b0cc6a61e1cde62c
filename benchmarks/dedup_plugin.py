"""The x-message-deduplication exchange with an empty cache and with a full one.

    hatch run bench:python benchmarks/dedup_plugin.py [--broker URL] [--size N ...]

Publishes N unique ids (100 confirmed publishes in flight) into an exchange with
``x-cache-size`` N, then N more: every one of those evicts the oldest entry. The
ratio shows what eviction costs; it should stay near 1 at any cache size.

It also deletes a small exchange (10 ids) before and after the big one is full:
deletion visits the exchange's own entries, so that ratio too should stay near 1.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import aio_pika
from aio_pika.abc import AbstractChannel
from peers_rabbitmq import dedup_exchange


async def measure(server: str, size: int, persistence: str) -> tuple[float, float]:
    capped = {"arguments": {"x-max-length": 10}}
    async with dedup_exchange(server, size, 600_000, persistence, **capped) as (exchange, tag):
        sem = asyncio.Semaphore(100)

        async def one(i: int) -> None:
            async with sem:
                message = aio_pika.Message(b"x", headers={"x-deduplication-header": f"{tag}:{i}"})
                await exchange.publish(message, routing_key="", mandatory=True)

        alone = await delete_small(exchange.channel, tag, persistence)
        rates = []
        for phase in range(2):
            t0 = time.perf_counter()
            await asyncio.gather(*(one(phase * size + i) for i in range(size)))
            rates.append(size / (time.perf_counter() - t0))
        beside = await delete_small(exchange.channel, tag, persistence)
    return rates[0], rates[1], alone, beside


async def delete_small(
    channel: AbstractChannel, tag: str, persistence: str, rounds: int = 5
) -> float:
    """Median seconds to delete an exchange holding 10 ids, its cache kept alike."""
    times = []
    for r in range(rounds):
        name = f"{tag}-small-{r}"
        x = await channel.declare_exchange(
            name,
            type="x-message-deduplication",
            arguments={"x-cache-size": 100, "x-cache-persistence": persistence},
        )
        q = await channel.declare_queue(name, arguments={"x-max-length": 10})
        await q.bind(x)
        for i in range(10):
            message = aio_pika.Message(b"x", headers={"x-deduplication-header": f"{name}:{i}"})
            await x.publish(message, routing_key="")
        t0 = time.perf_counter()
        await x.delete()
        times.append(time.perf_counter() - t0)
        await q.delete(if_unused=False, if_empty=False)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--size", type=int, action="append", help="cache sizes to measure")
    args = parser.parse_args()
    print(
        f"{'cache':<20} {'filling':>10} {'full':>10}  ratio"
        f"   {'delete alone':>12} {'beside full':>12}  ratio"
    )
    for size in args.size or [2_000, 20_000]:
        for persistence in ("memory", "disk"):
            filling, full, alone, beside = asyncio.run(measure(args.broker, size, persistence))
            label = f"{size:,} {persistence}"
            print(
                f"{label:<20} {filling:>8,.0f}/s {full:>8,.0f}/s  {full / filling:5.2f}"
                f"   {alone * 1000:>10.2f}ms {beside * 1000:>10.2f}ms  {beside / alone:5.2f}"
            )


if __name__ == "__main__":
    main()

"""The x-message-deduplication exchange with an empty cache and with a full one.

    hatch run bench:python benchmarks/dedup_plugin.py [--broker URL] [--size N ...]

Publishes N unique ids (100 confirmed publishes in flight) into an exchange with
``x-cache-size`` N, then N more: every one of those evicts the oldest entry. The
ratio shows what eviction costs; it should stay near 1 at any cache size.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import aio_pika
from peers_rabbitmq import dedup_exchange


async def measure(server: str, size: int, persistence: str) -> tuple[float, float]:
    capped = {"arguments": {"x-max-length": 10}}
    async with dedup_exchange(server, size, 600_000, persistence, **capped) as (exchange, tag):
        sem = asyncio.Semaphore(100)

        async def one(i: int) -> None:
            async with sem:
                message = aio_pika.Message(b"x", headers={"x-deduplication-header": f"{tag}:{i}"})
                await exchange.publish(message, routing_key="", mandatory=True)

        rates = []
        for phase in range(2):
            t0 = time.perf_counter()
            await asyncio.gather(*(one(phase * size + i) for i in range(size)))
            rates.append(size / (time.perf_counter() - t0))
    return rates[0], rates[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--size", type=int, action="append", help="cache sizes to measure")
    args = parser.parse_args()
    print(f"{'cache':<20} {'filling':>10} {'full':>10}  ratio")
    for size in args.size or [2_000, 20_000]:
        for persistence in ("memory", "disk"):
            filling, full = asyncio.run(measure(args.broker, size, persistence))
            label = f"{size:,} {persistence}"
            print(f"{label:<20} {filling:>8,.0f}/s {full:>8,.0f}/s  {full / filling:5.2f}")


if __name__ == "__main__":
    main()

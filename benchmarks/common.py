"""What the benchmark modules share."""

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable

# A body the size of a framework-m message with one small kwarg.
BODY = json.dumps(
    {
        "v": 1,
        "id": uuid.uuid4().hex,
        "job": "noop",
        "enqueued_at": time.time(),
        "scheduled_at": None,
        "dedup_id": "bench:000000000000000000000000:00000",
        "kwargs": {"i": 0},
    }
).encode()


async def in_batches(send: Callable[[int], Awaitable[object]], n: int, size: int = 500) -> None:
    """Call ``send(i)`` for i in range(n), ``size`` at a time, to fill a queue quickly."""
    for start in range(0, n, size):
        await asyncio.gather(*(send(i) for i in range(start, min(n, start + size))))

"""What the benchmark modules share."""

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

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


async def taskiq_drain(broker: Any, n: int) -> float:
    """Fill a started-up-later taskiq broker with ``n`` no-op tasks; time 50 at once draining it."""
    from taskiq.receiver import Receiver

    done = asyncio.Event()
    ran = 0

    @broker.task(task_name="noop")
    async def noop(i: int) -> None:
        nonlocal ran
        ran += 1
        if ran == n:
            done.set()

    await broker.startup()
    await in_batches(noop.kiq, n)
    finish = asyncio.Event()
    receiver = Receiver(broker, max_async_tasks=50, run_startup=False)
    t0 = time.perf_counter()
    listener = asyncio.create_task(receiver.listen(finish))
    finished = asyncio.create_task(done.wait())
    await asyncio.wait({listener, finished}, return_when=asyncio.FIRST_COMPLETED)
    elapsed = time.perf_counter() - t0
    if not done.is_set():  # the listener stopped early: say why instead of waiting forever
        finished.cancel()
        listener.result()
        raise RuntimeError(f"the taskiq receiver stopped after {ran} of {n} tasks")
    finish.set()
    listener.cancel()
    await asyncio.gather(listener, return_exceptions=True)
    return n / elapsed

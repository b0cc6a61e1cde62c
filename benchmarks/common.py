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


async def sends_per_second(
    send: Callable[[int], Awaitable[object]], n: int, inflight: int = 1, first: int = 0
) -> float:
    """Rate of ``send(i)`` for ``n`` values of i from ``first``: awaited one at a time, or
    with ``inflight`` outstanding."""
    t0 = time.perf_counter()
    if inflight == 1:
        for i in range(first, first + n):
            await send(i)
    else:
        slots = asyncio.Semaphore(inflight)

        async def one(i: int) -> None:
            async with slots:
                await send(i)

        await asyncio.gather(*(one(i) for i in range(first, first + n)))
    return n / (time.perf_counter() - t0)


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
    await stop_receiver(listener, finish, lambda: noop.kiq(-1))
    return n / elapsed


async def stop_receiver(
    listener: asyncio.Task[None], finish: asyncio.Event, wake: Callable[[], Awaitable[object]]
) -> None:
    """Stop a taskiq receiver the way it asks to be stopped (its finish event), within 15 s.

    Its prefetcher waits for one more message before it stops (forever on an idle
    taskiq-redis queue, and cancelling it then hangs too), so ``wake`` sends one."""
    finish.set()
    done, _ = await asyncio.wait({listener}, timeout=1)
    if not done:
        await wake()
        done, _ = await asyncio.wait({listener}, timeout=14)
    if not done:
        listener.cancel()
        raise RuntimeError("the taskiq receiver did not stop within 15 s")


# Longest wait for one job to start before a latency subject fails (it lost the job).
START_TIMEOUT = 30.0


class StartMark:
    """Set by a handler when it starts: the time and an event to wait on."""

    def __init__(self) -> None:
        self.at = 0.0
        self.event = asyncio.Event()

    def set(self) -> None:
        self.at = time.perf_counter()
        self.event.set()


async def latencies(
    send: Callable[[], Awaitable[object]], mark: StartMark, samples: int
) -> list[float]:
    """Seconds from the start of ``send()`` to the handler's start, one job at a time with
    the consumer idle (waiting for work) before each; a warm-up job first."""
    out: list[float] = []
    for k in range(samples + 1):
        await asyncio.sleep(0.005)  # the consumer is back to waiting for new work
        mark.event.clear()
        t0 = time.perf_counter()
        await send()
        async with asyncio.timeout(START_TIMEOUT):
            await mark.event.wait()
        if k:
            out.append(mark.at - t0)
    return out


async def taskiq_latency(broker: Any, samples: int) -> list[float]:
    """:func:`latencies` of a taskiq broker's receiver (50 tasks at once)."""
    from taskiq.receiver import Receiver

    mark = StartMark()

    @broker.task(task_name="mark")
    async def started() -> None:
        mark.set()

    await broker.startup()
    finish = asyncio.Event()
    receiver = Receiver(broker, max_async_tasks=50, run_startup=False)
    listener = asyncio.create_task(receiver.listen(finish))
    try:
        return await latencies(started.kiq, mark, samples)
    finally:
        await stop_receiver(listener, finish, started.kiq)

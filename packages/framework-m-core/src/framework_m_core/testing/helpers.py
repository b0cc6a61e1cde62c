"""Helpers for tests against a broker: polling with a deadline, draining, running a worker."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from ..adapters.registry import connect
from ..app import App
from ..ports.messages import decode_message
from ..ports.protocols import BrokerProtocol
from ..ports.records import Delivery
from ..runtime.worker import Worker

# Longest a test waits for something the broker should do promptly.
PROMPT = 5.0

BrokerFactory = Callable[[], BrokerProtocol]
B = TypeVar("B", bound=BrokerProtocol)


class DeadlineError(AssertionError):
    """A condition a test waited for did not hold in time."""


async def wait_until(
    predicate: Callable[[], bool | Awaitable[bool]],
    timeout: float = PROMPT,
    interval: float = 0.02,
    what: str = "condition",
) -> None:
    """Poll ``predicate`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if not isinstance(value, bool):
            value = await value
        if value:
            return
        if time.monotonic() >= deadline:
            raise DeadlineError(f"{what} not met within {timeout:g}s")
        await asyncio.sleep(interval)


async def synced(broker: B) -> B:
    """``broker`` connected and with its schema synced, ready for enqueue and receive."""
    await broker.connect()
    await broker.sync_schema()
    return broker


async def receive_all(
    broker: BrokerProtocol,
    *,
    quiet: float = 0.5,
    limit: int = 10_000,
    timeout: float = 30.0,
    ack: bool = True,
) -> list[Delivery]:
    """Receive until nothing arrives for ``quiet`` seconds; return what came.

    Each batch is acked as it arrives (so that a slow machine cannot see a delivery
    expire and come back); with ``ack=False`` the deliveries stay reserved, and
    ``quiet`` is capped at half the visibility timeout for the same reason.
    """
    if not ack:
        quiet = min(quiet, broker.visibility_timeout / 2)
    deadline = time.monotonic() + timeout
    out: list[Delivery] = []
    while len(out) < limit:
        batch = await broker.receive(100, quiet)
        if not batch:
            return out
        if ack:
            for delivery in batch:
                await broker.ack(delivery)
        out.extend(batch)
        if time.monotonic() > deadline:
            raise DeadlineError(f"deliveries kept coming for {timeout:g}s ({len(out)} so far)")
    return out


async def received_slots(broker: BrokerProtocol, *, quiet: float = 0.2) -> list[int]:
    """The slots (``scheduled_at``) of the messages :func:`receive_all` takes, in order;
    a message with none fails the test."""
    out = []
    for delivery in await receive_all(broker, quiet=quiet):
        message = decode_message(delivery.body)
        slot = message.scheduled_at
        assert slot is not None, f"message {message.id} has no slot"
        out.append(slot)
    return out


@dataclass(frozen=True)
class Received:
    """A delivery, the consumer that received it, and when (``time.monotonic()``)."""

    consumer: BrokerProtocol
    delivery: Delivery
    at: float


async def received_by_any(
    consumers: Sequence[BrokerProtocol], timeout: float, poll: float = 0.5
) -> list[Received]:
    """What the first round of receives in which any of ``consumers`` got something
    brought in; empty after ``timeout``.

    A broker that pushes messages to its consumers (RabbitMQ) may hand a message back to
    any of them, the one that released it included, so all receive at once. No receive
    is cancelled: each round waits for all of them.
    """

    async def take(consumer: BrokerProtocol, wait: float) -> list[Received]:
        batch = await consumer.receive(10, wait)
        at = time.monotonic()
        return [Received(consumer, d, at) for d in batch]

    deadline = time.monotonic() + timeout
    while True:
        wait = max(0.01, min(poll, deadline - time.monotonic()))
        rounds = await asyncio.gather(*(take(c, wait) for c in consumers))
        got = [r for batch in rounds for r in batch]
        if got or time.monotonic() >= deadline:
            return got


@asynccontextmanager
async def connected(factory: BrokerFactory, *, sync: bool = True) -> AsyncIterator[BrokerProtocol]:
    """A new broker from ``factory``, connected and (unless ``sync`` is False) synced;
    closed on exit."""
    broker = factory()
    await broker.connect()
    try:
        if sync:
            await broker.sync_schema()
        yield broker
    finally:
        await broker.close()


@asynccontextmanager
async def many(factory: BrokerFactory, n: int) -> AsyncIterator[Sequence[BrokerProtocol]]:
    """``n`` connected brokers from ``factory`` (one schema sync); all closed on exit."""
    brokers = [factory() for _ in range(n)]
    await asyncio.gather(*(b.connect() for b in brokers))
    try:
        await brokers[0].sync_schema()
        yield brokers
    finally:
        await asyncio.gather(*(b.close() for b in brokers), return_exceptions=True)


@asynccontextmanager
async def running_worker(app: App, broker: BrokerProtocol, **options: Any) -> AsyncIterator[Worker]:
    """A :class:`Worker` running in the background; stopped gracefully on exit."""
    options = {"concurrency": 4, "shutdown_timeout": 5.0, "fetch_timeout": 0.2, **options}
    worker = Worker(app, broker, **options)
    task = asyncio.create_task(worker.run())
    try:
        yield worker
    finally:
        worker.stop()
        async with asyncio.timeout(15 + worker.shutdown_timeout):
            await task


@contextmanager
def worker_in_a_thread(app: App, url: str, **options: Any) -> Iterator[None]:
    """A worker of ``app`` on the broker at ``url``, on an event loop of its own in a
    thread, for the block: what tests of blocking code (``connect_sync``) run beside."""
    stop, ready = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    async def main() -> None:
        try:
            async with connect(url) as broker, running_worker(app, broker, **options):
                ready.set()
                await asyncio.to_thread(stop.wait)
        except BaseException as exc:
            failed.append(exc)
            ready.set()
            raise

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="framework-m test worker")
    thread.start()
    try:
        if not ready.wait(30) or failed:
            raise AssertionError(f"the worker did not start: {failed or 'no answer in 30s'}")
        yield
    finally:
        stop.set()
        thread.join(30)

"""Contract tests of ``queue_stats()``: the broker's own counts, read from anywhere."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from ...ports.capabilities import Capability
from ...ports.protocols import BrokerProtocol
from ...ports.records import Delivery, QueueStats
from ..helpers import PROMPT, BrokerFactory, DeadlineError, connected, wait_until
from .base import ContractBase
from .requirements import requires


async def _holds(watcher: BrokerProtocol, **want: object) -> QueueStats:
    """Wait until ``watcher.queue_stats()`` shows ``want``; a value given as a tuple
    may be any of its items (None among them: the broker cannot tell)."""
    seen: list[QueueStats] = []

    async def matches() -> bool:
        stats = await watcher.queue_stats()
        seen.append(stats)
        return all(
            getattr(stats, k) in (v if isinstance(v, tuple) else (v,)) for k, v in want.items()
        )

    try:
        await wait_until(matches, PROMPT, interval=0.05, what=f"queue_stats {want}")
    except DeadlineError:
        raise AssertionError(f"queue_stats() never showed {want}; last {seen[-1]}") from None
    return seen[-1]


@contextlib.asynccontextmanager
async def _kept(broker: BrokerProtocol, held: list[Delivery]) -> AsyncIterator[None]:
    """Extend ``held`` often enough that a short visibility timeout cannot end them."""

    async def beat() -> None:
        while True:
            await asyncio.sleep(min(0.2, broker.visibility_timeout / 4))
            for delivery in list(held):
                await broker.extend(delivery)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class StatsContract(ContractBase):
    """``queue_stats()`` counts every connection's messages, by the broker's numbers."""

    @requires(Capability.QUEUE_STATS)
    async def test_queue_stats_count_ready_reserved_scheduled_and_dead(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        async with connected(broker_factory) as watcher:  # counts, not what it did itself
            await _holds(watcher, ready=0, reserved=(0, None), scheduled=(0, None), dead_letters=0)
            for i in range(3):
                await broker.enqueue("job", i=i)
            await _holds(watcher, ready=3, reserved=(0, None), dead_letters=0)
            held: list[Delivery] = []
            async with _kept(broker, held):
                while len(held) < 3:
                    held += await broker.receive(3 - len(held), PROMPT)
                stats = await _holds(watcher, ready=0, reserved=(3, None), dead_letters=0)
                assert stats.consumers is None or stats.consumers >= 1, stats
                await broker.ack(held[0])
                await broker.retry(held[1], 300)
                await broker.dead_letter(held[2], "poison")
                held.clear()
            stats = await _holds(watcher, ready=0, dead_letters=1, retries=(1, None))
            if stats.retries_in_reserved:
                await _holds(watcher, reserved=(1, None), scheduled=(0, None))
            else:
                await _holds(watcher, reserved=(0, None), scheduled=1)
            await broker.close()  # a consumer may take a job ahead (prefetch): none here
            await watcher.enqueue("job", i=3)
            await _holds(watcher, ready=1, dead_letters=1)

    @requires(Capability.QUEUE_STATS, Capability.DELAYED_ENQUEUE)
    async def test_a_delayed_job_counts_as_scheduled_and_never_as_a_retry(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        async with connected(broker_factory) as watcher:
            await broker.enqueue_in(300, "later", n=1)
            stats = await _holds(watcher, retries=(0, None), delayed=(1, None), dead_letters=0)
            if stats.delayed is None:  # cannot tell it from a retry: counted, never as one
                assert stats.retries is None, stats
                await _holds(watcher, ready=(0, 1), scheduled=(0, 1))
            else:
                await _holds(watcher, ready=0, scheduled=1, reserved=(0, None))
            await broker.enqueue("now", n=2)
            held: list[Delivery] = []
            async with _kept(broker, held):
                while not held:
                    held += await broker.receive(1, PROMPT)
                await broker.retry(held.pop(), 300)
            stats = await _holds(watcher, retries=(1, None), delayed=(1, None), ready=(0, 1))
            if stats.retries is not None and stats.delayed is not None:
                await _holds(watcher, scheduled=2, ready=0)
            elif stats.delayed is not None:  # the retry is reserved, the delayed job scheduled
                assert stats.retries_in_reserved, stats
                await _holds(watcher, scheduled=1, reserved=(1, None), ready=0)
            else:  # both in one count, or the delayed job still ready for a consumer
                assert stats.retries is None, stats
                await _holds(watcher, scheduled=(1, 2))

    async def test_queue_stats_without_the_capability_are_all_unknown_or_counts(
        self, broker: BrokerProtocol
    ) -> None:
        stats = await broker.queue_stats()
        assert isinstance(stats, QueueStats)
        for name in QueueStats.__slots__:
            value = getattr(stats, name)
            assert value is None or (isinstance(value, int) and value >= 0), (name, value)
        if Capability.QUEUE_STATS in broker.capabilities:
            assert stats.ready is not None
            assert stats.dead_letters is not None

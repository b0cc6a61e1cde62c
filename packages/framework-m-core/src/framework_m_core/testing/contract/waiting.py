"""Contract tests of ``waiting()``: the messages held and handed out to no consumer,
read from any connection without taking them."""

from __future__ import annotations

import time

from ...ports.capabilities import Capability
from ...ports.messages import decode_message
from ...ports.protocols import BrokerProtocol
from ...ports.records import Delivery, Waiting
from ..helpers import PROMPT, BrokerFactory, connected
from .base import ContractBase
from .requirements import requires


def _ids(found: list[Waiting]) -> list[str]:
    return [decode_message(w.body).id for w in found]


async def _take_one(broker: BrokerProtocol) -> Delivery:
    taken: list[Delivery] = []
    while not taken:
        taken += await broker.receive(1, PROMPT)
    return taken[0]


class WaitingContract(ContractBase):
    """``waiting()`` lists what waits: due first in delivery order, then by due time."""

    @requires(Capability.WAITING_INSPECTION, Capability.DELAYED_ENQUEUE)
    async def test_waiting_lists_due_jobs_in_order_then_held_ones_by_due_time(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        now = time.time()
        later = await broker.enqueue_in(600, "later", n=1)
        sooner = await broker.enqueue_in(300, "later", n=2)
        ready = [await broker.enqueue("job", i=i) for i in range(3)]
        async with connected(broker_factory) as watcher:  # any connection reads them
            found = list(await watcher.waiting(10))
            assert _ids(found) == [*ready, sooner, later]
            assert [w.due_at for w in found[:3]] == [None, None, None]
            assert [w.attempt for w in found] == [1] * 5
            held = [w.due_at for w in found[3:]]
            assert all(d is not None for d in held), held
            assert abs(held[0] - (now + 300)) < 5  # type: ignore[operator]
            assert abs(held[1] - (now + 600)) < 5  # type: ignore[operator]
            assert _ids(list(await watcher.waiting(2))) == ready[:2]
            assert list(await watcher.waiting(0)) == []
        taken = await _take_one(broker)
        assert decode_message(taken.body).id == ready[0]  # reading took nothing
        assert _ids(list(await broker.waiting(10))) == [*ready[1:], sooner, later]

    @requires(
        Capability.WAITING_INSPECTION, Capability.RETRY_INSPECTION, Capability.DELAYED_ENQUEUE
    )
    async def test_a_retry_waits_as_its_next_attempt_until_its_delay_is_over(
        self, broker: BrokerProtocol
    ) -> None:
        sooner = await broker.enqueue_in(300, "later", n=2)
        ready = [await broker.enqueue("job", i=i) for i in range(3)]
        taken = await _take_one(broker)
        await broker.retry(taken, 60)  # held until its retry is due, as attempt 2
        found = list(await broker.waiting(10))
        assert _ids(found) == [*ready[1:], ready[0], sooner]
        retry = found[2]
        assert retry.attempt == 2
        assert retry.due_at is not None
        assert abs(retry.due_at - (time.time() + 60)) < 5

    @requires(Capability.WAITING_INSPECTION)
    async def test_a_job_handed_out_is_not_waiting(self, broker: BrokerProtocol) -> None:
        first, second = await broker.enqueue("job", i=1), await broker.enqueue("job", i=2)
        taken = await _take_one(broker)
        assert decode_message(taken.body).id == first
        assert _ids(list(await broker.waiting(10))) == [second]

    @requires(Capability.WAITING_INSPECTION, Capability.RETRY_INSPECTION)
    async def test_a_released_job_waits_again(self, broker: BrokerProtocol) -> None:
        first, second = await broker.enqueue("job", i=1), await broker.enqueue("job", i=2)
        taken = await _take_one(broker)
        assert _ids(list(await broker.waiting(10))) == [second]
        await broker.release(taken)
        assert set(_ids(list(await broker.waiting(10)))) == {first, second}

    async def test_without_the_capability_waiting_lists_nothing_or_what_waits(
        self, broker: BrokerProtocol
    ) -> None:
        job_id = await broker.enqueue("job")
        found = list(await broker.waiting(10))
        if Capability.WAITING_INSPECTION in broker.capabilities:
            assert _ids(found) == [job_id]
        else:
            assert found == []

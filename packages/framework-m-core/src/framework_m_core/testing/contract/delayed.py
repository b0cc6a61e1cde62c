"""Contract tests of ``enqueue_at`` / ``enqueue_in``: held until due, then delivered once."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta

import pytest

from ...errors import BrokerError, InvalidJobError
from ...ports.capabilities import Capability
from ...ports.messages import decode_message
from ...ports.protocols import BrokerProtocol
from ..helpers import PROMPT, receive_all
from .base import ContractBase
from .requirements import requires

# Broker timers and a loaded machine: a due job may start this much after its time.
_LATE = 1.5


class DelayedContract(ContractBase):
    """Delayed jobs wait until due, keep the dedup promise, and refuse nonsense."""

    @requires(Capability.DELAYED_ENQUEUE)
    async def test_a_delayed_job_is_held_until_due_then_delivered_once(
        self, broker: BrokerProtocol
    ) -> None:
        due = time.time() + 1.2
        job_id = await broker.enqueue_at(datetime.fromtimestamp(due, UTC), "later", n=1)
        other = await broker.enqueue_in(timedelta(seconds=0.6), "sooner", n=2)
        now_id = await broker.enqueue("now", n=3)
        [first] = await broker.receive(10, PROMPT)
        assert decode_message(first.body).id == now_id  # the delayed ones wait
        await broker.ack(first)
        seen: dict[str, tuple[float, int]] = {}
        deadline = due + _LATE + PROMPT
        while len(seen) < 2 and time.time() < deadline:
            for delivery in await broker.receive(10, 0.2):
                seen[decode_message(delivery.body).id] = (time.time(), delivery.attempt)
                await broker.ack(delivery)
        assert set(seen) == {job_id, other}
        assert due <= seen[job_id][0] <= due + _LATE  # no sooner than due, ever
        assert seen[job_id][1] == seen[other][1] == 1
        assert seen[other][0] <= seen[job_id][0]
        assert await broker.receive(10, 0.3) == []

    @requires(Capability.DELAYED_ENQUEUE)
    async def test_a_job_due_in_a_few_ms_is_not_delivered_a_ms_before_it(
        self, broker: BrokerProtocol
    ) -> None:
        """Jobs due 10 to 105 ms ahead: the ones a broker delivers a little early (a
        timer, a TTL, rounding to whole ms) must still wait out their last ms."""
        start = time.time()
        dues = {}
        for i in range(20):
            due = start + 0.01 + i * 0.005
            dues[await broker.enqueue_at(due, "soon", i=i)] = due
        seen: dict[str, float] = {}
        deadline = max(dues.values()) + _LATE + PROMPT
        while len(seen) < len(dues) and time.time() < deadline:
            for delivery in await broker.receive(10, 0.2):
                seen[decode_message(delivery.body).id] = time.time()
                await broker.ack(delivery)
        assert set(seen) == set(dues)
        early = sorted(
            round((dues[job] - at) * 1000, 3) for job, at in seen.items() if at < dues[job]
        )
        assert early == [], f"delivered this many ms before due: {early}"

    @requires(Capability.DELAYED_ENQUEUE)
    async def test_a_delayed_job_keeps_the_dedup_promise(self, broker: BrokerProtocol) -> None:
        first = await broker.enqueue_in(0.3, "report", "tick:report:60", day=1)
        assert await broker.enqueue_in(0.3, "report", "tick:report:60", day=2) == first
        assert await broker.enqueue("report", "tick:report:60", day=3) == first
        [delivery] = await receive_all(broker, quiet=1.0)
        assert decode_message(delivery.body).kwargs == {"day": 1}
        assert broker.stats.duplicates == 2

    @requires(Capability.DELAYED_ENQUEUE)
    async def test_a_time_that_passed_enqueues_at_once(self, broker: BrokerProtocol) -> None:
        job_id = await broker.enqueue_at(time.time() - 3600, "overdue")
        [delivery] = await broker.receive(10, PROMPT)
        assert decode_message(delivery.body).id == job_id

    @pytest.mark.parametrize(
        "when",
        [datetime(2030, 1, 1), math.nan, math.inf, -1.0, "tomorrow", True],
    )
    async def test_a_time_that_is_not_one_is_refused(
        self, broker: BrokerProtocol, when: object
    ) -> None:
        refused: tuple[type[Exception], ...] = (InvalidJobError,)
        if Capability.DELAYED_ENQUEUE not in broker.capabilities:
            refused = (InvalidJobError, BrokerError)  # it cannot delay at all
        with pytest.raises(refused):
            await broker.enqueue_at(when, "job")  # type: ignore[arg-type]
        with pytest.raises(refused):
            await broker.enqueue_in(-5, "job")
        assert await broker.receive(10, 0.3) == []

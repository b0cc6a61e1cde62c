"""Contract tests of ``enqueue_many``: a batch is enqueues, sent in fewer round trips."""

from __future__ import annotations

import pytest

from ...errors import InvalidJobError
from ...ports.messages import decode_message
from ...ports.protocols import BrokerProtocol
from ...ports.records import BatchJob
from ..helpers import receive_all
from .base import ContractBase


class BatchContract(ContractBase):
    """Ids in order, duplicates inside and outside the batch, nothing sent when invalid."""

    async def test_a_batch_returns_each_job_s_id_in_order_and_stores_each_once(
        self, broker: BrokerProtocol
    ) -> None:
        jobs = [BatchJob("send", {"n": i}) for i in range(250)]  # more than one round of sends
        ids = await broker.enqueue_many(jobs)
        assert len(ids) == len(set(ids)) == 250
        got = {m.id: m for m in (decode_message(d.body) for d in await receive_all(broker))}
        assert set(got) == set(ids)
        assert [got[i].kwargs["n"] for i in ids] == list(range(250))  # each id names its job
        assert broker.stats.enqueued == 250
        assert await broker.enqueue_many([]) == []

    async def test_a_duplicate_in_a_batch_gets_the_original_s_id(
        self, broker: BrokerProtocol
    ) -> None:
        earlier = await broker.enqueue("report", deduplication_id="tick:report:60")
        ids = await broker.enqueue_many(
            [
                BatchJob("report", {}, "tick:report:60"),  # a duplicate of an earlier enqueue
                BatchJob("report", {"day": 2}, "tick:report:120"),
                BatchJob("report", {"day": 3}, "tick:report:120"),  # of one earlier in the batch
                BatchJob("report", {"day": 4}),
            ]
        )
        assert ids[0] == earlier
        assert ids[1] == ids[2] != ids[3]
        got = sorted(decode_message(d.body).kwargs.get("day", 0) for d in await receive_all(broker))
        assert got == [0, 2, 4]
        assert (broker.stats.enqueued, broker.stats.duplicates) == (3, 2)

    async def test_of_two_jobs_with_one_id_in_a_batch_the_first_is_stored_every_time(
        self, broker: BrokerProtocol
    ) -> None:
        """Many batches, each with pairs of jobs sharing an id: an adapter whose publishes
        of one batch race each other stores the later of a pair now and then."""
        rounds, pairs = 30, 10
        for r in range(rounds):
            jobs = []
            for p in range(pairs):
                dedup_id = f"pair:{r}:{p}"
                jobs += [BatchJob("pair", {"which": "first"}, dedup_id)]
                jobs += [BatchJob("pair", {"which": "second"}, dedup_id)]
            ids = await broker.enqueue_many(jobs)
            assert ids[0::2] == ids[1::2]  # each second copy gets the first one's id
        got = [decode_message(d.body) for d in await receive_all(broker)]
        assert len(got) == rounds * pairs
        assert {m.kwargs["which"] for m in got} == {"first"}
        assert broker.stats.duplicates == rounds * pairs

    @pytest.mark.parametrize(
        "bad",
        [
            BatchJob("no spaces allowed"),
            BatchJob("job", {"x": object()}),
            BatchJob("job", {}, " padded"),
        ],
    )
    async def test_one_invalid_job_sends_none_of_the_batch(
        self, broker: BrokerProtocol, bad: BatchJob
    ) -> None:
        with pytest.raises(InvalidJobError):
            await broker.enqueue_many([BatchJob("fine", {"n": 1}), bad, BatchJob("fine", {"n": 2})])
        assert await broker.receive(10, 0.3) == []
        assert broker.stats.enqueued == 0

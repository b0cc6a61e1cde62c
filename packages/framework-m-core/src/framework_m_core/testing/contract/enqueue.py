"""Contract tests of enqueueing and deduplication (``JobQueueProtocol``, ``publish``)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from ...errors import InvalidJobError
from ...ports.capabilities import Capability
from ...ports.messages import JobMessage, decode_message
from ...ports.protocols import BrokerProtocol
from ..helpers import BrokerFactory, many, receive_all
from .base import ContractBase
from .requirements import SHORT_DEDUP_WINDOW, requires


class EnqueueContract(ContractBase):
    """Ids, validation before sending, duplicates, and the dedup window."""

    async def test_enqueue_returns_distinct_ids_and_the_message_round_trips(
        self, broker: BrokerProtocol
    ) -> None:
        first = await broker.enqueue("send", to="a@example.com", n=1)
        second = await broker.enqueue("send", to="b@example.com", n=2)
        assert isinstance(first, str)
        assert first
        assert first != second
        got = {m.id: m for m in (decode_message(d.body) for d in await receive_all(broker))}
        assert set(got) == {first, second}
        assert (got[first].job_name, got[first].kwargs) == ("send", {"to": "a@example.com", "n": 1})
        assert got[second].kwargs == {"to": "b@example.com", "n": 2}
        assert broker.stats.enqueued == 2

    @pytest.mark.parametrize(
        ("job", "dedup_id", "kwargs"),
        [
            ("job", None, {"when": object()}),
            ("job", None, {"ratio": float("nan")}),
            ("no spaces allowed", None, {}),
            ("trailing_newline\n", None, {}),
            ("", None, {}),
            ("job", "", {}),
            ("job", "line\nbreak", {}),
            ("job", " padded", {}),
            ("job", "x" * 513, {}),
        ],
    )
    async def test_an_invalid_job_is_refused_before_anything_is_sent(
        self, broker: BrokerProtocol, job: str, dedup_id: str | None, kwargs: dict[str, object]
    ) -> None:
        with pytest.raises(InvalidJobError):
            await broker.enqueue(job, dedup_id, **kwargs)
        assert await broker.receive(10, 0.3) == []
        assert broker.stats.enqueued == 0

    async def test_a_job_over_the_size_limit_is_refused_naming_its_size_and_the_limit(
        self, broker: BrokerProtocol
    ) -> None:
        limit: int | None = getattr(broker, "max_body_size", None)
        if limit is None:
            pytest.skip("the adapter stores jobs of any size (max_body_size is None)")
        empty = len(JobMessage("big", {"blob": ""}).encode())  # give or take the time's digits
        with pytest.raises(InvalidJobError, match=rf" is [\d,]+ bytes encoded; .*{limit:,} bytes"):
            await broker.enqueue("big", blob="x" * (limit - empty + 64))
        assert await broker.receive(10, 0.3) == []
        assert broker.stats.enqueued == 0
        fits = await broker.enqueue("big", blob="x" * (limit - empty - 64))
        [delivery] = await receive_all(broker)
        assert decode_message(delivery.body).id == fits

    async def test_a_duplicate_returns_the_original_id_stores_nothing_and_is_counted(
        self, broker: BrokerProtocol, caplog: pytest.LogCaptureFixture
    ) -> None:
        first = await broker.enqueue("report", deduplication_id="tick:report:1700000000", day=1)
        # The level of framework-m's logger itself: another test may have set it higher.
        with caplog.at_level(logging.DEBUG, logger="framework_m"):
            again = await broker.enqueue("report", deduplication_id="tick:report:1700000000", day=2)
        assert again == first
        assert (broker.stats.enqueued, broker.stats.duplicates) == (1, 1)
        assert any("tick:report:1700000000" in r.getMessage() for r in caplog.records)
        [delivery] = await receive_all(broker)
        assert decode_message(delivery.body).kwargs == {"day": 1}

    async def test_publish_says_which_was_a_duplicate_and_carries_the_slot(
        self, broker: BrokerProtocol
    ) -> None:
        def slot_message() -> JobMessage:
            return JobMessage(
                "tick", deduplication_id="tick:tick:60", enqueued_at=61.5, scheduled_at=60
            )

        first = await broker.publish(slot_message())
        again = await broker.publish(slot_message())
        assert not first.duplicate
        assert again.duplicate
        assert again.job_id == first.job_id
        [delivery] = await receive_all(broker)
        stored = decode_message(delivery.body)
        assert (stored.id, stored.scheduled_at, stored.enqueued_at) == (first.job_id, 60, 61.5)
        assert stored.deduplication_id == "tick:tick:60"

    async def test_concurrent_publishers_of_one_id_leave_one_message(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        publishers = 8
        async with many(broker_factory, publishers) as brokers:
            ids = await asyncio.gather(
                *(b.enqueue("tick_job", deduplication_id="tick:tick_job:42") for b in brokers)
            )
            assert len(set(ids)) == 1
            assert sum(b.stats.duplicates for b in brokers) == publishers - 1
            assert sum(b.stats.enqueued for b in brokers) == 1
        deliveries = await receive_all(broker)
        assert [decode_message(d.body).id for d in deliveries] == [ids[0]]

    async def test_concurrent_publishes_of_one_id_on_one_connection_store_one(
        self, broker: BrokerProtocol
    ) -> None:
        results = await asyncio.gather(
            *(broker.publish(JobMessage("tick", deduplication_id="tick:tick:7")) for _ in range(8))
        )
        assert [r.duplicate for r in results].count(False) == 1
        assert len({r.job_id for r in results}) == 1
        assert (broker.stats.enqueued, broker.stats.duplicates) == (1, 7)
        assert len(await receive_all(broker)) == 1

    async def test_distinct_ids_are_never_merged(self, broker: BrokerProtocol) -> None:
        alike = ["tick:job:1", "tick:job:10", "TICK:job:1", "tick:jöb:1", "tick:job:1 x"]
        alike += ["tick:job:1.0", "tick:job:01", "tick job 1", "tick:job:\u0661"]
        dedup_ids = alike + [f"tick:other:{i}" for i in range(40)]
        ids = await asyncio.gather(*(broker.enqueue("job", deduplication_id=d) for d in dedup_ids))
        assert len(set(ids)) == len(dedup_ids)
        assert broker.stats.duplicates == 0
        stored = [decode_message(d.body).deduplication_id for d in await receive_all(broker)]
        assert sorted(stored, key=str) == sorted(dedup_ids)

    @requires(SHORT_DEDUP_WINDOW)
    async def test_an_id_is_a_duplicate_for_the_whole_window_and_new_after_it(
        self, broker: BrokerProtocol
    ) -> None:
        window = broker.dedup_window
        for trial in range(3):  # a trial that a stalled machine stretched past the window is void
            dedup_id = f"expiring:{trial}"
            sent = time.monotonic()
            first = await broker.enqueue("job", deduplication_id=dedup_id)
            stored_by = time.monotonic()
            await asyncio.sleep(window * 0.5)
            inside = await broker.enqueue("job", deduplication_id=dedup_id)
            if time.monotonic() - sent < window:
                break
        assert inside == first, "an id was forgotten inside the dedup window"
        await asyncio.sleep(max(0.0, stored_by + window + 0.5 - time.monotonic()))
        stored_before = broker.stats.enqueued
        await broker.enqueue("job", deduplication_id=dedup_id)
        assert broker.stats.enqueued == stored_before + 1, "an id was kept past the window"
        bodies = [decode_message(d.body) for d in await receive_all(broker)]
        assert [m.deduplication_id for m in bodies].count(dedup_id) == 2

    @requires(SHORT_DEDUP_WINDOW, Capability.NEW_ID_AFTER_WINDOW)
    async def test_an_id_reused_after_the_window_gets_a_new_job_id(
        self, broker: BrokerProtocol
    ) -> None:
        first = await broker.enqueue("job", deduplication_id="reused")
        await asyncio.sleep(broker.dedup_window + 0.5)
        assert await broker.enqueue("job", deduplication_id="reused") != first

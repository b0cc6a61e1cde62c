"""Contract tests of the consuming side (``ConsumerProtocol``, ``connect``/``close``)."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable

import pytest

from ...errors import DeliveryLostError
from ...ports.capabilities import Capability
from ...ports.messages import decode_message
from ...ports.protocols import BrokerProtocol
from ...ports.records import Delivery
from ..helpers import PROMPT, BrokerFactory, connected, receive_all, received_by_any
from .base import ContractBase
from .requirements import SHORT_VISIBILITY, requires

# Bodies a broker must return byte for byte, whatever they hold.
ODD_BODIES = [
    b"",
    b"\x00\xffnot json at all\r\n",
    b'{"v": 1, "id": "x", "job": "known"}',
    "\u2603 snow".encode(),
    bytes(range(256)) * 64,
]


async def _taken_again(other: BrokerProtocol, job_id: str, within: float) -> Delivery:
    """The next delivery of ``job_id`` that ``other`` receives within ``within`` seconds."""
    [again] = await other.receive(10, within)
    assert decode_message(again.body).id == job_id
    return again


class ConsumeContract(ContractBase):
    """Receiving, reservations, settling, dead letters, and the consumer's lifecycle."""

    async def test_the_first_delivery_is_attempt_one(self, broker: BrokerProtocol) -> None:
        await broker.enqueue("job")
        [delivery] = await broker.receive(10, PROMPT)
        assert delivery.attempt == 1

    async def test_receive_never_returns_more_than_asked(self, broker: BrokerProtocol) -> None:
        for i in range(5):
            await broker.enqueue("job", i=i)
        batch = await broker.receive(2, PROMPT)
        assert 1 <= len(batch) <= 2
        seen: list[Delivery] = []
        while True:
            seen += batch
            for delivery in batch:  # settled at once: none may expire and come back
                await broker.ack(delivery)
            if len(seen) >= 5:
                break
            batch = await broker.receive(1, PROMPT)
            assert len(batch) == 1
        assert sorted(decode_message(d.body).kwargs["i"] for d in seen) == [0, 1, 2, 3, 4]

    async def test_receive_returns_once_a_delivery_is_there_without_filling_the_batch(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        await broker.enqueue("job")
        started = time.monotonic()
        first = await broker.receive(10, 30)
        assert len(first) == 1
        assert time.monotonic() - started < 10
        await broker.ack(first[0])  # else it comes back after the visibility timeout
        waits = []
        async with connected(broker_factory) as producer:
            for _ in range(5):  # the median: one slow moment on a busy machine does not count
                waiting = asyncio.create_task(broker.receive(10, 30))
                await asyncio.sleep(0.2)  # let it wait for new messages
                sent = time.monotonic()
                await producer.enqueue("job")
                [delivery] = await waiting
                waits.append(time.monotonic() - sent)
                await broker.ack(delivery)
        assert statistics.median(waits) < 0.1, f"receive waited for more after one: {waits}"

    async def test_receive_waits_at_most_its_timeout_and_returns_nothing(
        self, broker: BrokerProtocol
    ) -> None:
        started = time.monotonic()
        assert list(await broker.receive(10, 0.5)) == []
        assert time.monotonic() - started < 0.5 + 2.5

    async def test_bodies_come_back_byte_for_byte_as_new_messages(
        self, broker: BrokerProtocol
    ) -> None:
        for body in ODD_BODIES:
            await broker.requeue(body)
        got = await receive_all(broker)
        assert sorted(d.body for d in got) == sorted(ODD_BODIES)
        assert {d.attempt for d in got} == {1}

    async def test_a_reserved_delivery_goes_to_no_other_consumer(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        await broker.enqueue("job")
        async with connected(broker_factory) as other:
            [taken] = await broker.receive(10, PROMPT)
            assert list(await other.receive(10, min(broker.visibility_timeout / 2, 1.0))) == []
            await broker.ack(taken)

    @requires(SHORT_VISIBILITY)
    async def test_an_unsettled_delivery_comes_back_after_the_visibility_timeout_not_before(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        visibility = broker.visibility_timeout
        job_id = await broker.enqueue("job", x=1)
        async with connected(broker_factory) as other:
            started = time.monotonic()
            [taken] = await broker.receive(10, PROMPT)  # and never settled: a crashed worker
            again = await _taken_again(other, job_id, visibility + PROMPT)
            assert time.monotonic() - started >= visibility - 0.05, "redelivered too early"
            assert again.attempt == taken.attempt + 1
            assert again.body == taken.body
            await other.ack(again)

    async def test_an_acked_delivery_never_comes_back(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        await broker.enqueue("job")
        async with connected(broker_factory) as consumer:
            [delivery] = await consumer.receive(10, PROMPT)
            await consumer.ack(delivery)
        # The consumer is gone: an unacked delivery would be released now or expire.
        assert list(await broker.receive(10, min(broker.visibility_timeout + 0.5, 2.0))) == []

    async def test_settling_again_changes_nothing(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        ids = [await broker.enqueue("job", i=i) for i in range(3)]
        taken = {decode_message(d.body).id: d for d in await receive_all(broker, ack=False)}
        acked, retried, released = (taken[i] for i in ids)
        for _ in range(2):
            await broker.ack(acked)
            await broker.retry(retried, 0.2)
            await broker.release(released)
        back: list[str] = []
        async with connected(broker_factory) as other:
            while len(back) < 2:
                got = await received_by_any([other, broker], PROMPT)
                assert got, f"only {back} came back"
                for r in got:
                    job_id = decode_message(r.delivery.body).id
                    assert job_id not in back, "a repeated settle call made a second copy"
                    back.append(job_id)
                    await r.consumer.ack(r.delivery)  # before it could expire and come back
            assert sorted(back) == sorted(ids[1:])
            more = await received_by_any([other, broker], 0.5)
            assert more == [], "a repeated settle call made a second copy"

    @requires(Capability.DEAD_LETTER_INSPECTION)
    async def test_dead_lettering_again_stores_one_dead_letter(
        self, broker: BrokerProtocol
    ) -> None:
        await broker.enqueue("job")
        [delivery] = await broker.receive(10, PROMPT)
        await broker.dead_letter(delivery, "poison")
        await broker.dead_letter(delivery, "poison")
        assert [d.reason for d in await broker.dead_letters()] == ["poison"]

    async def test_retry_delivers_again_after_the_delay_to_any_consumer(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        job_id = await broker.enqueue("job", x=1)
        async with connected(broker_factory) as other:  # before the reservation's clock starts
            [first] = await broker.receive(10, PROMPT)
            retried_at = time.monotonic()
            await broker.retry(first, 0.5)
            # Rounds outlast the delay: nats-server 2.9 hands a retry out as new (attempt 1) if it
            # falls due as every pull expires, as with 0.5s rounds (fixed by nats-server#5305).
            [again] = await received_by_any([other, broker], PROMPT, poll=1.0)
            assert again.at - retried_at >= 0.45, "delivered before its delay"
            assert decode_message(again.delivery.body).id == job_id
            assert again.delivery.attempt == first.attempt + 1
            await again.consumer.ack(again.delivery)

    async def test_a_released_delivery_is_available_at_once(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        job_id = await broker.enqueue("job")
        async with connected(broker_factory) as other:
            started = time.monotonic()
            [first] = await broker.receive(10, PROMPT)
            await broker.release(first)
            [again] = await received_by_any([other, broker], PROMPT, poll=0.1)
            assert again.at - started < broker.visibility_timeout, "not released"
            assert decode_message(again.delivery.body).id == job_id
            assert again.delivery.attempt in (first.attempt, first.attempt + 1)
            await again.consumer.ack(again.delivery)

    @requires(Capability.REDELIVER_ON_CLOSE, Capability.UNCOUNTED_RELEASE)
    async def test_what_a_closing_consumer_releases_keeps_its_attempt(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        ids = {await broker.enqueue("job", i=i) for i in range(5)}
        async with connected(broker_factory) as consumer:
            [taken] = await consumer.receive(1, PROMPT)  # a prefetching client holds more
        back = await receive_all(broker)
        assert {decode_message(d.body).id for d in back} == ids
        assert [d.attempt for d in back] == [taken.attempt] * 5, "never run, yet counted"

    @requires(Capability.UNCOUNTED_RELEASE)
    async def test_a_release_is_not_counted_as_an_attempt(self, broker: BrokerProtocol) -> None:
        job_id = await broker.enqueue("job")
        [first] = await broker.receive(10, PROMPT)
        await broker.retry(first, 0)
        [second] = await broker.receive(10, PROMPT)
        await broker.release(second)
        third = await _taken_again(broker, job_id, PROMPT)
        assert (first.attempt, second.attempt, third.attempt) == (1, 2, 2)

    @requires(SHORT_VISIBILITY)
    async def test_extend_keeps_a_long_job_reserved(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        visibility = broker.visibility_timeout
        async with connected(broker_factory) as other:  # before the clock starts
            await broker.enqueue("job")
            [taken] = await broker.receive(10, PROMPT)
            end = time.monotonic() + visibility * 2.5
            while time.monotonic() < end:
                await broker.extend(taken)
                assert list(await other.receive(10, visibility / 3)) == []
        await broker.ack(taken)

    @requires(SHORT_VISIBILITY)
    async def test_settling_an_expired_reservation_leaves_the_redelivery_alone(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        visibility = broker.visibility_timeout
        job_id = await broker.enqueue("job")
        [stale] = await broker.receive(10, PROMPT)
        async with connected(broker_factory) as holder, connected(broker_factory) as third:
            held = await _taken_again(holder, job_id, visibility + PROMPT)
            settles: list[Callable[[], Awaitable[None]]] = [
                lambda: broker.ack(stale),
                lambda: broker.retry(stale, 0),
                lambda: broker.release(stale),
                lambda: broker.dead_letter(stale, "late"),
                lambda: broker.extend(stale),
            ]
            for settle in settles:
                with pytest.raises(DeliveryLostError):
                    await settle()
            # The holder went silent: its reservation, untouched, runs out like any other.
            last = await _taken_again(third, job_id, visibility + PROMPT)
            assert last.attempt == held.attempt + 1
            assert list(await third.receive(10, 0.5)) == []
            await third.ack(last)

    @requires(SHORT_VISIBILITY, Capability.DEAD_LETTER_INSPECTION)
    async def test_dead_lettering_an_expired_reservation_stores_nothing(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        job_id = await broker.enqueue("job")
        [stale] = await broker.receive(10, PROMPT)
        async with connected(broker_factory) as holder:
            held = await _taken_again(holder, job_id, broker.visibility_timeout + PROMPT)
            with pytest.raises(DeliveryLostError):
                await broker.dead_letter(stale, "late")
            assert list(await broker.dead_letters()) == []
            await holder.ack(held)

    @requires(Capability.DEAD_LETTER_INSPECTION, Capability.DEAD_LETTER_REMOVAL)
    async def test_removed_dead_letters_are_gone_and_the_rest_stay_in_order(
        self, broker: BrokerProtocol
    ) -> None:
        for i in range(3):
            await broker.enqueue("job", i=i)
        for d in sorted(
            await receive_all(broker, ack=False), key=lambda d: decode_message(d.body).kwargs["i"]
        ):
            await broker.dead_letter(d, f"reason {decode_message(d.body).kwargs['i']}")
        letters = list(await broker.dead_letters())
        assert [d.reason for d in letters] == ["reason 0", "reason 1", "reason 2"]
        assert await broker.remove_dead_letters([letters[1]]) == 1
        assert [d.reason for d in await broker.dead_letters()] == ["reason 0", "reason 2"]
        assert await broker.remove_dead_letters([letters[1]]) == 0  # gone already
        assert await broker.remove_dead_letters(list(await broker.dead_letters())) == 2
        assert list(await broker.dead_letters()) == []
        assert list(await broker.receive(10, 0.3)) == []  # removing runs nothing

    @requires(Capability.DEAD_LETTER_INSPECTION)
    async def test_a_dead_letter_keeps_body_reason_attempt_and_time(
        self, broker: BrokerProtocol
    ) -> None:
        await broker.requeue(ODD_BODIES[1])
        [first] = await broker.receive(10, PROMPT)
        await broker.retry(first, 0)
        [second] = await broker.receive(10, PROMPT)
        before = time.time()
        await broker.dead_letter(second, "poison: test \u2603")
        after = time.time()
        [dead] = await broker.dead_letters()
        assert (dead.body, dead.reason, dead.attempts) == (ODD_BODIES[1], "poison: test \u2603", 2)
        assert before - 5 <= dead.dead_lettered_at <= after + 5
        assert list(await broker.receive(10, min(broker.visibility_timeout + 0.5, 2.0))) == []

    @requires(Capability.DEAD_LETTER_INSPECTION)
    async def test_dead_letters_are_the_latest_oldest_first_at_most_limit(
        self, broker: BrokerProtocol
    ) -> None:
        for i in range(5):
            await broker.enqueue("job", i=i)
            [delivery] = await broker.receive(1, PROMPT)
            await broker.dead_letter(delivery, f"reason {i}")
        assert [d.reason for d in await broker.dead_letters(3)] == [
            f"reason {i}" for i in (2, 3, 4)
        ]
        everything = [d.reason for d in await broker.dead_letters()]
        assert everything == [f"reason {i}" for i in range(5)]
        assert [d.reason for d in await broker.dead_letters()] == everything  # reading kept them
        assert list(await broker.dead_letters(0)) == []

    @requires(Capability.REDELIVER_ON_CLOSE)
    async def test_close_releases_reserved_deliveries_at_once(
        self, broker: BrokerProtocol, broker_factory: BrokerFactory
    ) -> None:
        job_id = await broker.enqueue("job")
        async with connected(broker_factory) as consumer:
            # The reservation starts after this: a job not released comes back no sooner
            # than a visibility timeout later (a connect and sync beforehand, slow on a
            # loaded machine, are not counted).
            started = time.monotonic()
            assert len(await consumer.receive(10, PROMPT)) == 1
        await _taken_again(broker, job_id, PROMPT)
        assert time.monotonic() - started < broker.visibility_timeout, "not released"

"""Headers a publisher wrote: a count that is not ours neither breaks a batch nor grants
attempts, and a reason is cut to fit in one AMQP frame."""

from __future__ import annotations

from typing import Any

import aio_pika
import pytest

from framework_m_core.testing import PROMPT, receive_all
from framework_m_rabbitmq import RabbitBroker
from framework_m_rabbitmq.testing import RabbitNamespace
from framework_m_rabbitmq.wire import ATTEMPTS_HEADER, NOT_BEFORE_HEADER, REASON_BYTES

from .conftest import AMQP_URL

pytestmark = pytest.mark.anyio

# (RabbitMQ itself refuses infinite and NaN doubles: the publisher loses its connection.)
HOSTILE: list[Any] = ["x", "-5", -5, "1e400", "nan", 2.5, 10**12, [3], {"n": 3}, True, "7"]


async def test_hostile_counts_are_the_broker_count_alone(namespace: RabbitNamespace) -> None:
    async with RabbitBroker.from_url(namespace.url()) as broker:
        await broker.sync_schema()
        connection = await aio_pika.connect(AMQP_URL)
        try:
            channel = await connection.channel()
            for i, value in enumerate(HOSTILE):
                headers = {ATTEMPTS_HEADER: value, "x-delivery-count": value}
                message = aio_pika.Message(b"%d" % i, headers=headers)
                await channel.default_exchange.publish(message, routing_key=broker.settings.jobs)
        finally:
            await connection.close()
        got = await receive_all(broker, timeout=PROMPT)
        assert sorted((int(d.body), d.attempt) for d in got) == [
            (i, 15 if value == "7" else 1) for i, value in enumerate(HOSTILE)
        ]


async def test_a_long_reason_is_cut_to_fit_a_frame(namespace: RabbitNamespace) -> None:
    async with RabbitBroker.from_url(namespace.url()) as broker:
        await broker.sync_schema()
        await broker.enqueue("job")
        [delivery] = await broker.receive(10, PROMPT)
        reason = "boom \u2603 " * 40_000  # 360 KB of UTF-8, over the 128 KiB frame_max
        await broker.dead_letter(delivery, reason)
        [dead] = await broker.dead_letters()
        assert reason.startswith(dead.reason)
        assert REASON_BYTES - 4 < len(dead.reason.encode()) <= REASON_BYTES
        await broker.enqueue("job")  # the connection is still up
        assert len(await broker.receive(10, PROMPT)) == 1


async def test_a_due_time_that_is_not_one_makes_the_job_due_now(
    namespace: RabbitNamespace,
) -> None:
    """A publisher's x-fm-not-before that is no unix time in ms must not hold a job for
    ever (nor hop it round the buckets): it is due at once."""
    hostile: list[Any] = ["soon", -1, 2**62, 2.5e15, [1], True]
    async with RabbitBroker.from_url(namespace.url()) as broker:
        await broker.sync_schema()
        connection = await aio_pika.connect(AMQP_URL)
        try:
            channel = await connection.channel()
            for i, value in enumerate(hostile):
                message = aio_pika.Message(b"%d" % i, headers={NOT_BEFORE_HEADER: value})
                await channel.default_exchange.publish(message, routing_key=broker.settings.jobs)
        finally:
            await connection.close()
        got = await receive_all(broker, timeout=PROMPT)
        assert sorted(int(d.body) for d in got) == list(range(len(hostile)))
        stats = await broker.queue_stats()
        assert stats.scheduled == 0  # none went round a bucket

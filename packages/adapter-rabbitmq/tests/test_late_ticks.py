"""A tick a quorum queue stored only after its deadline (quorum lost, then back): RabbitMQ
cannot say when it stored it, so one first delivered past its deadline is not run."""

from __future__ import annotations

import logging
import time

import aio_pika
import pytest
from aiormq.abc import DeliveredMessage
from pamqp.commands import Basic
from pamqp.header import ContentHeader

from framework_m_core import App, JobContext, JobMessage
from framework_m_core.runtime.execution import DELIVERY_SKEW
from framework_m_core.testing import receive_all, running_worker, wait_until
from framework_m_rabbitmq import RabbitBroker
from framework_m_rabbitmq.testing import RabbitNamespace


async def stored_directly(broker: RabbitBroker, message: JobMessage) -> None:
    """Into the jobs queue past the exchange's deadline check, as a queue that stores a
    routed message only when quorum returns does."""
    connection = await aio_pika.connect(broker.settings.connection_url)
    try:
        channel = await connection.channel()
        body = aio_pika.Message(message.encode(), message_id=message.id)
        await channel.default_exchange.publish(body, routing_key=f"{broker.settings.queue}.jobs")
    finally:
        await connection.close()


@pytest.mark.anyio
async def test_a_tick_first_delivered_past_its_deadline_is_expired_not_run(
    namespace: RabbitNamespace,
) -> None:
    app = App()
    ran: list[int] = []

    @app.job
    async def tick(ctx: JobContext) -> None:
        assert ctx.scheduled_at is not None
        ran.append(int(ctx.scheduled_at.timestamp()))

    now = time.time()

    def slot(at: int, not_after: float) -> JobMessage:
        return JobMessage(
            "tick", deduplication_id=f"tick:tick:{at}", scheduled_at=at, not_after=not_after
        )

    async with RabbitBroker.from_url(namespace.url()) as broker:
        await broker.sync_schema()
        await stored_directly(broker, slot(1, now - 40))  # 40 s late: a quorum back late
        await stored_directly(broker, slot(2, now - DELIVERY_SKEW / 2))  # within clock skew
        await stored_directly(broker, slot(3, now + 30))
        async with running_worker(app, broker) as worker:
            await wait_until(lambda: worker.stats.expired == 1 and len(ran) == 2)
        assert sorted(ran) == [2, 3]
        assert await receive_all(broker) == []


def test_a_return_after_the_publish_was_given_up_is_said_without_its_body(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What aiormq logs for a basic.return whose confirm nobody waits for any more."""
    returned = DeliveredMessage(
        delivery=Basic.Return(reply_code=312, reply_text="NO_ROUTE"),
        header=ContentHeader(properties=Basic.Properties(message_id="job-1")),
        body=b'{"kwargs": {"token": "s3cret"}}',
        channel=None,  # type: ignore[arg-type]
    )
    with caplog.at_level(logging.INFO):
        logging.getLogger("aiormq.channel").error("Unhandled message %r returning", returned)
    [record] = caplog.records
    assert record.levelno == logging.INFO
    assert record.getMessage() == (
        "amqp: message job-1 came back after its publish was given up: not stored (NO_ROUTE)"
    )
    assert "s3cret" not in caplog.text

"""The contract suite against the RabbitMQ on 127.0.0.1:5672 with the deduplication plugin."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable

import aio_pika
import pytest

from framework_m_core.testing import BrokerContract
from framework_m_rabbitmq import RabbitBroker

from .test_dedup_plugin import AMQP_URL


async def delete_topology(queue: str) -> None:
    connection = await aio_pika.connect(AMQP_URL)
    try:
        channel = await connection.channel()
        for name in [f"{queue}.jobs", f"{queue}.dead"] + [
            f"{queue}.retry.{ms}" for ms in (100, 250, 500, 1000, 2000, 5000)
        ]:
            await channel.queue_delete(name)
        await channel.exchange_delete(f"{queue}.dedup")
    finally:
        await connection.close()


class TestRabbitBroker(BrokerContract):
    @pytest.fixture
    async def broker_factory(self) -> AsyncIterator[Callable[[], RabbitBroker]]:
        queue = f"fmtest_{uuid.uuid4().hex[:12]}"
        url = f"{AMQP_URL}?queue={queue}&dedup_window=1"
        yield lambda: RabbitBroker.from_url(url)
        await delete_topology(queue)

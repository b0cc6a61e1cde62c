"""The index of state records: a record's queue is listed before it is declared, so a
write that dies between the two leaves nothing that dropping the namespace misses."""

from __future__ import annotations

import aio_pika
import pytest

from framework_m_core.ports import BrokerError
from framework_m_rabbitmq import RabbitBroker
from framework_m_rabbitmq.state import index_queue, record_queue
from framework_m_rabbitmq.testing import RabbitNamespace

pytestmark = pytest.mark.anyio


async def test_a_record_queue_is_listed_before_it_is_declared(namespace: RabbitNamespace) -> None:
    async with RabbitBroker.from_url(namespace.url()) as broker:
        await broker.sync_schema()
        s = broker.settings
        queue = record_queue(f"{s.queue}.state", "k")
        connection = await aio_pika.connect(namespace.server)
        channel = await connection.channel()
        try:
            # A queue of that name the record's declare refuses: the write dies there.
            await channel.declare_queue(queue, durable=False)
            with pytest.raises(BrokerError, match="exists otherwise"):
                await broker.write_state("k", b"v", version=None)
            channel = await connection.channel()
            index = await channel.declare_queue(index_queue(s), passive=True)
            listed = await index.get(no_ack=False, fail=False)
            assert listed is not None
            assert listed.body.decode() == queue
            await listed.reject(requeue=True)  # for the namespace's drop
        finally:
            await (await connection.channel()).queue_delete(queue)  # listed or not
            await connection.close()

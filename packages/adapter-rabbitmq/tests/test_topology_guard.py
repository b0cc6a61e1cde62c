"""A duplicate and an unbound exchange both answer a publish with basic.return: the
adapter binds the jobs queue before its first publish, so the second cannot pass for
the first and drop a job."""

from __future__ import annotations

import aio_pika
import pytest

from framework_m_core.control.shared import shared
from framework_m_core.errors import BrokerError, SchemaConflictError
from framework_m_core.ports import Capability
from framework_m_core.ports.store import Write
from framework_m_rabbitmq import RabbitBroker
from framework_m_rabbitmq.testing import RabbitNamespace

from .conftest import AMQP_URL

pytestmark = pytest.mark.anyio


@pytest.fixture
async def url(namespace: RabbitNamespace) -> str:
    url = namespace.url()
    async with RabbitBroker.from_url(url) as broker:
        await broker.sync_schema()
    return url


async def test_a_lost_binding_is_restored_before_the_first_publish(url: str) -> None:
    broker = RabbitBroker.from_url(url)
    s = broker.settings
    connection = await aio_pika.connect(AMQP_URL)
    channel = await connection.channel()
    jobs = await channel.get_queue(s.jobs)
    await jobs.unbind(s.exchange)  # the binding sync made (routing key: the name)
    await connection.close()
    async with broker:
        job_id = await broker.enqueue("kept", deduplication_id="tick:kept:1")
        [delivery] = await broker.receive(1, 5)
        assert job_id.encode() in delivery.body
        assert broker.stats.duplicates == 0
        await broker.ack(delivery)


async def test_a_missing_queue_fails_the_publish_naming_the_fix(url: str) -> None:
    broker = RabbitBroker.from_url(url)
    connection = await aio_pika.connect(AMQP_URL)
    channel = await connection.channel()
    await channel.queue_delete(broker.settings.jobs)
    await connection.close()
    async with broker:
        with pytest.raises(BrokerError, match=r"m sync-schema"):
            await broker.enqueue("lost", deduplication_id="tick:lost:1")
        assert broker.stats.duplicates == 0


async def test_store_off_keeps_no_store_exchange_and_says_so(url: str) -> None:
    async with RabbitBroker.from_url(url + "&store=off") as broker:
        gone = {Capability.STORE}
        assert not gone & broker.capabilities
        assert gone <= RabbitBroker.capabilities  # the class keeps it
        targets = [c.target for c in (await broker.plan_schema()).changes]
        assert f"exchange {broker.settings.store_exchange}" not in targets
        with pytest.raises(BrokerError, match="keeps no store"):
            await broker.store.read(["k"])
        with pytest.raises(BrokerError, match="keeps no shared state"):
            await shared(broker).get_memo("k")


async def test_a_missing_store_exchange_fails_store_calls_naming_the_fix(url: str) -> None:
    broker = RabbitBroker.from_url(url)
    store = broker.settings.store_exchange
    connection = await aio_pika.connect(AMQP_URL)
    channel = await connection.channel()
    await channel.exchange_delete(store)
    await connection.close()
    async with broker:
        with pytest.raises(BrokerError, match=r"m sync-schema"):
            await broker.store.write([Write("k", b"v")])
        [change] = (await broker.plan_schema()).changes
        assert (change.action, change.target) == ("create", f"exchange {store}")
        await broker.sync_schema()
        assert await shared(broker).put_memo("k", b"v", ttl=60)
        assert await shared(broker).get_memo("k") == b"v"


async def test_a_new_dedup_window_is_refused_not_ignored(url: str) -> None:
    async with RabbitBroker.from_url(url + "&dedup_window=60") as broker:
        plan = await broker.plan_schema()
        [change] = plan.refused
        assert change.target == f"exchange {broker.settings.exchange}"
        assert "x-cache-ttl" in change.detail
        with pytest.raises(SchemaConflictError, match="x-cache-ttl"):
            await broker.sync_schema()


async def test_a_retry_into_a_lost_retry_queue_keeps_the_job(url: str) -> None:
    async with RabbitBroker.from_url(url) as broker:
        await broker.enqueue("flaky", n=1)
        [first] = await broker.receive(1, 5)
        await broker.retry(first, 0.1)  # into <queue>.retry.100, which schema sync declared
        [second] = await broker.receive(1, 5)
        assert second.attempt == 2
        connection = await aio_pika.connect(AMQP_URL)
        channel = await connection.channel()
        await channel.queue_delete(f"{broker.settings.queue}.retry.100")
        await connection.close()
        await broker.retry(second, 0.1)  # the copy comes back unrouted: declared, sent again
        [third] = await broker.receive(1, 5)
        assert third.attempt == 3
        await broker.ack(third)
        assert await broker.receive(1, 0.5) == []


def test_the_plugin_sources_and_their_build_command_are_reachable_from_the_package() -> None:
    import subprocess
    import sys

    from framework_m_rabbitmq import plugin

    where = plugin.sources()
    assert (where / "build.sh").is_file()
    assert (where / "src" / "rabbit_exchange_type_fm_dedup.erl").is_file()
    shown = subprocess.run(
        [sys.executable, "-m", "framework_m_rabbitmq.plugin", "path"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert shown.stdout.strip() == str(where)
    assert plugin.main(["nonsense"]) == 2

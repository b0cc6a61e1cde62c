"""The largest job each broker stores: a 20 MB kwarg is refused at enqueue, naming its size
and the limit (1 MiB by default, the URL's ``max_job_size``; NATS: the server's payload)."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterator

import pytest

from framework_m_core import ConfigurationError, InvalidJobError, JobMessage, open_broker
from framework_m_core.testing import namespace
from framework_m_core.testing.namespaces import with_option

SERVERS = {
    "memory": "memory://",
    "redis": "redis://127.0.0.1:6379/0",
    "rabbitmq": "amqp://guest:guest@127.0.0.1:5672/",
    "nats": "nats://127.0.0.1:4222",
}
OWN_LIMIT = [name for name in SERVERS if name != "nats"]
BIG = "x" * (20 << 20)  # the 20 MB kwarg a Redis queue took and dead-lettered whole


@pytest.fixture
def queue_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A queue of the test's own on the broker named by the test's parameter."""
    server = SERVERS[request.param]
    if server == "memory://":
        yield f"memory://size-{uuid.uuid4().hex[:8]}"
        return
    ns = namespace(server)
    try:
        yield ns.url()
    finally:
        asyncio.run(ns.drop())


def size_in(said: str) -> int:
    found = re.search(r" is ([\d,]+) bytes encoded; ", said)
    assert found is not None, said
    return int(found.group(1).replace(",", ""))


@pytest.mark.parametrize("queue_url", SERVERS, indirect=True)
def test_a_20_mb_job_is_refused_naming_its_size_and_the_limit(queue_url: str) -> None:
    async def scenario() -> None:
        async with open_broker(queue_url) as broker:
            await broker.sync_schema()
            with pytest.raises(InvalidJobError) as refused:
                await broker.enqueue("report", blob=BIG)
            said = str(refused.value)
            assert (20 << 20) < size_in(said) < (20 << 20) + 400, said
            if queue_url.startswith("nats://"):  # the server's max_payload less header room
                assert f"stores at most {broker.max_body_size:,} bytes: " in said
            else:
                assert "stores at most 1,048,576 bytes (its URL option max_job_size): " in said
            assert said.endswith("pass large data by reference (a key, a URL), not in kwargs")
            assert await broker.receive(10, 0.3) == []

    asyncio.run(scenario())


@pytest.mark.parametrize("queue_url", OWN_LIMIT, indirect=True)
def test_max_job_size_in_the_url_sets_the_limit(queue_url: str) -> None:
    empty = len(JobMessage("report", {"blob": ""}).encode())

    async def scenario() -> None:
        async with open_broker(with_option(queue_url, "max_job_size", 4096)) as broker:
            await broker.sync_schema()
            with pytest.raises(InvalidJobError, match=r"stores at most 4,096 bytes \(its URL"):
                await broker.enqueue("report", blob="x" * (4096 - empty + 64))
            fits = await broker.enqueue("report", blob="x" * (4096 - empty - 64))
            [delivery] = await broker.receive(10, 5)
            assert fits.encode() in delivery.body
            await broker.ack(delivery)

    asyncio.run(scenario())
    for bad in ("100", "0", str(1 << 30)):
        with pytest.raises(ConfigurationError, match="max_job_size must be between 1,024 and"):
            open_broker(with_option(queue_url, "max_job_size", bad))

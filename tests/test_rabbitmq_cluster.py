"""framework-m's dedup plugin on a 2-node RabbitMQ cluster that the test starts itself:
the cache is a Mnesia table with a copy on every node, so a duplicate is caught whichever
node each replica is connected to."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import Iterator

import pytest

from framework_m_rabbitmq import RabbitBroker
from framework_m_rabbitmq.testing import RabbitNamespace

from .brokers import RabbitServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RabbitServer, RabbitServer]]:
    workdir, cookie = tmp_path_factory.mktemp("cluster"), uuid.uuid4().hex
    first, second = RabbitServer(workdir, cookie=cookie), RabbitServer(workdir, cookie=cookie)
    try:
        first.start()
        second.start()
        second.join(first)
        yield first, second
    finally:
        second.stop(signal.SIGKILL)
        first.stop(signal.SIGKILL)


@pytest.mark.parametrize("persistence", ["disk", "memory"])
def test_a_duplicate_is_caught_on_the_other_node(
    cluster: tuple[RabbitServer, RabbitServer], persistence: str
) -> None:
    first, second = cluster
    tag = uuid.uuid4().hex[:12]
    options = {"cache_persistence": persistence, "management": first.management_url}

    async def scenario() -> tuple[list[str], list[int], list[bytes]]:
        on_first = RabbitBroker.from_url(RabbitNamespace(first.url, tag).url(**options))
        on_second = RabbitBroker.from_url(RabbitNamespace(second.url, tag).url(**options))
        async with on_first, on_second:
            await on_first.sync_schema()
            ids = [
                await on_first.enqueue("tick", deduplication_id="tick:tick:1"),
                await on_second.enqueue("tick", deduplication_id="tick:tick:1"),
                await on_second.enqueue("tick", deduplication_id="tick:tick:2"),
                await on_first.enqueue("tick", deduplication_id="tick:tick:2"),
            ]
            bodies = []
            while batch := await on_second.receive(10, 2):
                for delivery in batch:
                    bodies.append(delivery.body)
                    await on_second.ack(delivery)
            return ids, [on_first.stats.duplicates, on_second.stats.duplicates], bodies

    ids, duplicates, bodies = asyncio.run(scenario())
    assert ids[0] == ids[1] != ids[2] == ids[3]
    assert duplicates == [1, 1]
    assert len(bodies) == 2
    table, copies = {
        "disk": ("fm_dedup_cache_disk", "disc_copies"),
        "memory": ("fm_dedup_cache", "ram_copies"),
    }[persistence]
    held_by = second.ctl("eval", f"lists:sort(mnesia:table_info({table}, {copies})).")
    assert first.node in held_by
    assert second.node in held_by

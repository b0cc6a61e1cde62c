"""framework-m's x-message-deduplication exchange plugin, on the machine's RabbitMQ.

`packages/adapter-rabbitmq/plugin/build.sh` builds, installs and enables it
(`.ci/run` calls it). Every test declares its own exchange and queues and
deletes them, leaving the broker clean.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractQueue
from aio_pika.exceptions import ChannelPreconditionFailed, DeliveryError

from .conftest import AMQP_URL

pytestmark = pytest.mark.anyio


@pytest.fixture
async def channel() -> AsyncIterator[AbstractChannel]:
    connection = await aio_pika.connect(AMQP_URL)
    ch = await connection.channel(publisher_confirms=True, on_return_raises=True)
    yield ch
    await connection.close()


class Topology:
    def __init__(self, channel: AbstractChannel) -> None:
        self.channel = channel
        self.exchanges: list[AbstractExchange] = []
        self.queues: list[AbstractQueue] = []

    async def exchange(self, **arguments: Any) -> AbstractExchange:
        x = await self.channel.declare_exchange(
            f"fmtest-dedup-{uuid.uuid4().hex[:8]}",
            type="x-message-deduplication",
            arguments=arguments,
            auto_delete=False,
        )
        self.exchanges.append(x)
        return x

    async def queue(self, exchange: AbstractExchange) -> AbstractQueue:
        q = await self.channel.declare_queue(f"fmtest-q-{uuid.uuid4().hex[:8]}")
        await q.bind(exchange)
        self.queues.append(q)
        return q

    async def clean(self) -> None:
        for q in self.queues:
            await q.delete(if_unused=False, if_empty=False)
        for x in self.exchanges:
            await x.delete()


@pytest.fixture
async def topology(channel: AbstractChannel) -> AsyncIterator[Topology]:
    t = Topology(channel)
    yield t
    await t.clean()


async def send(x: AbstractExchange, body: bytes, dedup: str | None, **headers: Any) -> bool:
    """Publish with mandatory; True when routed, False when returned (a duplicate)."""
    if dedup is not None:
        headers["x-deduplication-header"] = dedup
    try:
        await x.publish(aio_pika.Message(body, headers=headers), routing_key="", mandatory=True)
    except DeliveryError:
        return False
    return True


async def bodies(q: AbstractQueue) -> list[bytes]:
    out = []
    while (msg := await q.get(no_ack=True, fail=False, timeout=2)) is not None:
        out.append(msg.body)
    return out


async def test_a_duplicate_is_routed_nowhere(topology: Topology) -> None:
    x = await topology.exchange(**{"x-cache-size": 100})
    q = await topology.queue(x)
    assert await send(x, b"first", "tick:job:1")
    assert not await send(x, b"second", "tick:job:1")
    assert await send(x, b"other", "tick:job:2")
    assert await bodies(q) == [b"first", b"other"]


async def test_messages_without_the_header_fan_out(topology: Topology) -> None:
    x = await topology.exchange(**{"x-cache-size": 10})
    q1, q2 = await topology.queue(x), await topology.queue(x)
    assert await send(x, b"a", None)
    assert await send(x, b"a", None)
    assert await bodies(q1) == [b"a", b"a"]
    assert await bodies(q2) == [b"a", b"a"]


async def test_entries_expire_after_the_ttl(topology: Topology) -> None:
    x = await topology.exchange(**{"x-cache-size": 10, "x-cache-ttl": 400})
    q = await topology.queue(x)
    assert await send(x, b"1", "id")
    assert not await send(x, b"2", "id")
    await asyncio.sleep(0.6)  # let the TTL pass
    assert await send(x, b"3", "id")
    # a per-message TTL overrides the exchange's
    assert await send(x, b"4", "short", **{"x-cache-ttl": 100})
    await asyncio.sleep(0.25)
    assert await send(x, b"5", "short")
    assert await bodies(q) == [b"1", b"3", b"4", b"5"]


async def test_the_cache_size_is_bounded(topology: Topology) -> None:
    x = await topology.exchange(**{"x-cache-size": 2})
    await topology.queue(x)
    for dedup in ("a", "b", "c"):  # "a" is evicted as the oldest
        assert await send(x, dedup.encode(), dedup)
    assert not await send(x, b"c", "c")
    assert await send(x, b"a", "a")


async def test_a_missing_cache_size_is_refused(channel: AbstractChannel) -> None:
    with pytest.raises(ChannelPreconditionFailed, match="x-cache-size"):
        await channel.declare_exchange(
            f"fmtest-dedup-{uuid.uuid4().hex[:8]}", type="x-message-deduplication"
        )


async def test_a_disk_persisted_cache_deduplicates_and_bounds_alike(topology: Topology) -> None:
    x = await topology.exchange(**{"x-cache-size": 2, "x-cache-persistence": "disk"})
    q = await topology.queue(x)
    assert await send(x, b"a", "a")
    assert not await send(x, b"a", "a")
    assert await send(x, b"b", "b")
    assert await send(x, b"c", "c")  # evicts "a"
    assert await send(x, b"a", "a")
    assert await bodies(q) == [b"a", b"b", b"c", b"a"]


async def test_an_unknown_persistence_is_refused(channel: AbstractChannel) -> None:
    with pytest.raises(ChannelPreconditionFailed, match="x-cache-persistence"):
        await channel.declare_exchange(
            f"fmtest-dedup-{uuid.uuid4().hex[:8]}",
            type="x-message-deduplication",
            arguments={"x-cache-size": 10, "x-cache-persistence": "tape"},
        )


@pytest.mark.parametrize(
    "changed", [{"x-cache-size": 11}, {"x-cache-ttl": 5000}, {"x-cache-persistence": "disk"}]
)
async def test_a_redeclaration_with_other_arguments_is_refused(
    topology: Topology, changed: dict[str, Any]
) -> None:
    x = await topology.exchange(**{"x-cache-size": 10, "x-cache-ttl": 1000})
    connection = await aio_pika.connect(AMQP_URL)
    try:
        channel = await connection.channel()
        with pytest.raises(ChannelPreconditionFailed, match="inequivalent arg"):
            await channel.declare_exchange(
                x.name,
                type="x-message-deduplication",
                arguments={"x-cache-size": 10, "x-cache-ttl": 1000, **changed},
            )
    finally:
        await connection.close()


async def test_long_ids_are_kept_as_a_digest_and_still_told_apart(topology: Topology) -> None:
    x = await topology.exchange(**{"x-cache-size": 100})
    q = await topology.queue(x)
    long_a, long_b = "a" * 100_000, "a" * 99_999 + "b"
    assert await send(x, b"1", long_a)
    assert not await send(x, b"2", long_a)
    assert await send(x, b"3", long_b)  # differs in its last byte only
    assert await send(x, b"4", "a" * 64)  # short ids are kept as they are
    assert not await send(x, b"5", "a" * 64)
    assert await bodies(q) == [b"1", b"3", b"4"]
    size = await cache_bytes()
    for i in range(200):  # 200 ids of 50 KB each: the cache grows by entries, not bytes
        assert await send(x, b"", f"{i:04d}" + "x" * 50_000)
    assert await cache_bytes() - size < 200 * 1_000


async def cache_bytes() -> int:
    """The bytes the RAM cache table takes on the node (rabbitmqctl eval)."""
    proc = await asyncio.create_subprocess_exec(
        "rabbitmqctl", "--quiet", "eval",
        "mnesia:table_info(fm_dedup_cache, memory) * erlang:system_info(wordsize).",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate()
    return int(out.strip())


@pytest.mark.parametrize("size", [0, 10_000_001])
async def test_an_absurd_cache_size_is_refused(channel: AbstractChannel, size: int) -> None:
    with pytest.raises(ChannelPreconditionFailed, match="from 1 to 10000000"):
        await channel.declare_exchange(
            f"fmtest-dedup-{uuid.uuid4().hex[:8]}",
            type="x-message-deduplication",
            arguments={"x-cache-size": size},
        )


async def test_deleting_an_exchange_forgets_its_ids_and_keeps_the_others(
    topology: Topology,
) -> None:
    kept = await topology.exchange(**{"x-cache-size": 100})
    await topology.queue(kept)
    gone = await topology.exchange(**{"x-cache-size": 100})
    await topology.queue(gone)
    for dedup in ("a", "b"):
        assert await send(kept, b"", dedup)
        assert await send(gone, b"", dedup)
    name = gone.name
    await gone.delete()
    topology.exchanges.remove(gone)
    again = await topology.channel.declare_exchange(
        name, type="x-message-deduplication", arguments={"x-cache-size": 100}
    )
    topology.exchanges.append(again)
    await topology.queue(again)
    assert await send(again, b"", "a")  # forgotten with the exchange
    assert not await send(kept, b"", "a")  # the other exchange's ids stay
    assert not await send(kept, b"", "b")

"""framework-m's x-fm-store exchange, spoken to over raw AMQP on the machine's RabbitMQ.

The store contract area covers the store's promises through the adapter; these tests
cover what the exchange itself does with requests the adapter never sends (malformed
operations, no reply_to), how it keeps its table small, where its records live, and
its declaration. Every test declares its own exchanges and deletes them.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractIncomingMessage
from aio_pika.exceptions import ChannelPreconditionFailed

from framework_m_core.testing.helpers import wait_until

from .conftest import AMQP_URL

pytestmark = pytest.mark.anyio

TYPE = "x-fm-store"
RESULT, ERROR = "x-fm-store-result", "x-fm-store-error"


def read(key: str) -> bytes:
    k = key.encode()
    return struct.pack(">BH", 1, len(k)) + k


def write(key: str, value: bytes | None, cond: int = 0, version: int = 0, ttl: int = 0) -> bytes:
    """cond 0 any, 1 absent, 2 version; value None deletes."""
    k, data = key.encode(), value or b""
    head = struct.pack(">BQBII", cond, version, value is None, ttl, len(data))
    return struct.pack(">BH", 2, len(k)) + k + head + data


def claim(key: str, places: int, value: bytes, ttl: int) -> bytes:
    k = key.encode()
    return struct.pack(">BH", 3, len(k)) + k + struct.pack(">HII", places, ttl, len(value)) + value


class Store:
    """One channel with a reply queue, asking store exchanges of its own."""

    def __init__(self, channel: AbstractChannel) -> None:
        self.channel = channel
        self.exchanges: list[AbstractExchange] = []
        self.answers: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
        self.reply_to = ""

    async def start(self) -> None:
        reply = await self.channel.declare_queue(exclusive=True, auto_delete=True)
        await reply.consume(self.answers.put, no_ack=True)
        self.reply_to = reply.name

    async def exchange(self, **arguments: Any) -> AbstractExchange:
        x = await self.channel.declare_exchange(
            f"fmtest-store-{uuid.uuid4().hex[:8]}", type=TYPE, arguments=arguments
        )
        self.exchanges.append(x)
        return x

    async def ask(
        self, x: AbstractExchange, body: bytes, *, reply: bool = True
    ) -> AbstractIncomingMessage | None:
        correlation = uuid.uuid4().hex
        await x.publish(
            aio_pika.Message(
                body, reply_to=self.reply_to if reply else None, correlation_id=correlation
            ),
            routing_key="",
        )
        if not reply:
            return None
        answer = await asyncio.wait_for(self.answers.get(), 10)
        assert answer.correlation_id == correlation
        return answer

    async def ok(self, x: AbstractExchange, *ops: bytes) -> bytes:
        """The body of an ``ok`` answer to ``ops``."""
        answer = await self.ask(x, b"".join(ops))
        assert answer is not None
        assert (answer.headers or {}).get(RESULT) == "ok", answer.headers
        return answer.body

    async def get(self, x: AbstractExchange, key: str) -> tuple[int, bytes] | None:
        body = await self.ok(x, read(key))
        found, version, size = struct.unpack_from(">BQI", body)
        assert len(body) == 13 + size
        return (version, body[13:]) if found else None

    async def clean(self) -> None:
        for x in self.exchanges:
            await x.delete()


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    connection = await aio_pika.connect(AMQP_URL)
    s = Store(await connection.channel())
    await s.start()
    try:
        yield s
    finally:
        await s.clean()
        await connection.close()


def versions(body: bytes) -> list[int]:
    return [v for (v,) in struct.iter_unpack(">Q", body)]


async def test_writes_answer_in_order_each_seeing_the_ones_before(store: Store) -> None:
    x = await store.exchange()
    assert await store.get(x, "k") is None
    body = await store.ok(
        x,
        write("k", b"one", cond=1),  # absent: stored
        write("k", b"two", cond=1),  # absent again: refused, the first is there
        write("k", b"any"),  # any: stored
        write("gone", None),  # a delete of nothing: refused
    )
    first, refused, third, nothing = versions(body)
    assert (refused, nothing) == (0, 0)
    assert 0 < first < third
    assert await store.get(x, "k") == (third, b"any")
    stale, current = versions(
        await store.ok(x, write("k", b"s", 2, first), write("k", b"c", 2, third))
    )
    assert stale == 0
    assert current > third
    (deleted,) = versions(await store.ok(x, write("k", None, 2, current)))
    assert deleted == current  # a delete answers with the version it removed
    assert await store.get(x, "k") is None


async def test_versions_grow_across_keys_and_past_a_deleted_exchange(store: Store) -> None:
    x = await store.exchange()
    a, b = versions(await store.ok(x, write("a", b"1"), write("b", b"2")))
    assert a < b
    await x.delete()
    store.exchanges.remove(x)
    again = await store.channel.declare_exchange(x.name, type=TYPE)
    store.exchanges.append(again)
    assert await store.get(again, "a") is None  # the records went with the exchange
    (c,) = versions(await store.ok(again, write("a", b"3")))
    assert c > b  # a version it gave before is never given again


async def test_a_claim_takes_the_first_free_place_or_its_own_again(store: Store) -> None:
    x = await store.exchange()
    taken = await store.ok(
        x,
        claim("lim", 2, b"h1", 60_000),
        claim("lim", 2, b"h2", 60_000),
        claim("lim", 2, b"h3", 60_000),  # full
        claim("lim", 2, b"h1", 60_000),  # h1's own place again, a new version
    )
    (p1, v1), (p2, _), (p3, v3), (p4, v4) = struct.iter_unpack(">HQ", taken)
    assert (p1, p2, p3, v3, p4) == (0, 1, 0xFFFF, 0, 0)
    assert v4 > v1
    assert await store.get(x, "lim#0") == (v4, b"h1")
    await store.ok(x, write("lim#0", None))
    ((p5, _),) = struct.iter_unpack(">HQ", await store.ok(x, claim("lim", 2, b"h3", 60_000)))
    assert p5 == 0


async def test_a_record_is_gone_after_its_ttl_by_the_brokers_clock(store: Store) -> None:
    x = await store.exchange()
    await store.ok(x, write("short", b"v", ttl=300), write("kept", b"v"))
    assert await store.get(x, "short") is not None
    await wait_until(lambda: _gone(store, x, "short"), timeout=10, what="the expiry")
    assert await store.get(x, "kept") is not None
    (again,) = versions(await store.ok(x, write("short", b"w", cond=1)))  # expired: absent
    assert again > 0


async def test_a_request_without_reply_to_is_carried_out_unanswered(store: Store) -> None:
    x = await store.exchange()
    await store.ask(x, write("k", b"quiet"), reply=False)
    got = await store.get(x, "k")  # answers come in order: the write was done
    assert got is not None
    assert got[1] == b"quiet"
    assert store.answers.empty()


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"", "at least one operation"),
        (bytes([9]) + read("k")[1:], "a malformed operation"),
        (read(""), "key is 1 to 2048 bytes"),
        (read("k" * 2049), "key is 1 to 2048 bytes"),
        (write("k", b"v", cond=3), "condition is 0 any"),
        (write("k", b"v", cond=2, version=0), "condition is 0 any"),
        (write("k", None, ttl=5), "a delete takes no ttl"),
        (write("k", b"v", ttl=604_800_001), "ttl is 1 to 604800000"),
        (write("k", b"v" * 131_073), "at most 131072 bytes"),
        (claim("k", 0, b"v", 1000), "1 to 1000 places"),
        (claim("k", 1001, b"v", 1000), "1 to 1000 places"),
        (claim("k", 1, b"v", 0), "ttl is 1 to 604800000"),
        (write("k", b"v")[:-1], "a malformed operation"),
        (read("k") * 1001, "at most 1000 operations"),
    ],
)
async def test_a_request_with_a_bad_operation_is_refused_whole(
    store: Store, body: bytes, why: str
) -> None:
    x = await store.exchange()
    answer = await store.ask(x, write("written", b"v") + body if body else body)
    assert answer is not None
    assert (answer.headers or {})[RESULT] == "error"
    assert why in str((answer.headers or {})[ERROR])
    assert await store.get(x, "written") is None  # nothing of it was carried out


async def test_writes_drop_expired_records_nobody_reads(store: Store) -> None:
    x = await store.exchange(**{"x-store-persistence": "memory"})
    await store.ok(x, *[write(f"short-{i}", b"v", ttl=1500) for i in range(50)])
    assert await rows("fm_store", x) == 50
    await wait_until(lambda: _gone(store, x, "short-49"), timeout=10, what="the last expiry")
    assert await rows("fm_store", x) == 50  # a read drops nothing
    for i in range(4):  # each request with a write drops up to 16 expired ones
        await store.ok(x, write(f"long-{i}", b"v", ttl=60_000))
    assert await rows("fm_store", x) == 4


async def test_records_of_exchanges_are_apart_and_go_with_their_exchange(store: Store) -> None:
    one, two = await store.exchange(), await store.exchange()
    await store.ok(one, write("k", b"1"))
    await store.ok(two, write("j", b"2", ttl=60_000))
    assert await store.get(two, "k") is None
    assert await rows("fm_store_disk", one) == 1
    await one.delete()
    store.exchanges.remove(one)
    assert await rows("fm_store_disk", one) == 0  # deleted with the exchange, in the call
    assert await rows("fm_store_disk", two) == 1


async def test_disk_is_the_default_and_memory_keeps_records_in_ram(store: Store) -> None:
    disk, memory = await store.exchange(), await store.exchange(**{"x-store-persistence": "memory"})
    await store.ok(disk, write("k", b"d"))
    await store.ok(memory, write("k", b"m"))
    assert (await rows("fm_store_disk", disk), await rows("fm_store", disk)) == (1, 0)
    assert (await rows("fm_store_disk", memory), await rows("fm_store", memory)) == (0, 1)


async def test_an_unknown_persistence_or_another_one_is_refused() -> None:
    connection = await aio_pika.connect(AMQP_URL)
    name = f"fmtest-store-{uuid.uuid4().hex[:8]}"
    try:
        with pytest.raises(ChannelPreconditionFailed, match="x-store-persistence"):
            await (await connection.channel()).declare_exchange(
                name, type=TYPE, arguments={"x-store-persistence": "tape"}
            )
        channel = await connection.channel()
        x = await channel.declare_exchange(
            name, type=TYPE, arguments={"x-store-persistence": "memory"}
        )
        with pytest.raises(ChannelPreconditionFailed, match="x-store-persistence"):
            await (await connection.channel()).declare_exchange(
                name, type=TYPE, arguments={"x-store-persistence": "disk"}
            )
        await x.delete()
    finally:
        await connection.close()


async def _gone(store: Store, x: AbstractExchange, key: str) -> bool:
    return await store.get(x, key) is None


async def rows(table: str, x: AbstractExchange) -> int:
    """The rows of exchange ``x`` in a store table on the node (rabbitmqctl eval)."""
    name = f'{{resource, <<"/">>, exchange, <<"{x.name}">>}}'
    pattern = "{fm_record, {" + name + ", '_'}, '_', '_', '_', '_'}"
    proc = await asyncio.create_subprocess_exec(
        "rabbitmqctl", "--quiet", "eval", f"length(mnesia:dirty_match_object({table}, {pattern})).",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate()
    return int(out.strip())

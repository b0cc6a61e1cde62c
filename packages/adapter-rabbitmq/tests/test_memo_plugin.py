"""framework-m's x-fm-memos exchange, spoken to over raw AMQP on the machine's RabbitMQ.

The contract suite covers the memo promises through the adapter; these tests cover what
the exchange itself does with requests the adapter never sends (bad headers, no
reply_to), how it keeps its table small, and its declaration. Every test declares its
own exchanges and deletes them.
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


class Memos:
    """One channel with a reply queue, asking memo exchanges of its own."""

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
            f"fmtest-memos-{uuid.uuid4().hex[:8]}", type="x-fm-memos", arguments=arguments
        )
        self.exchanges.append(x)
        return x

    async def ask(
        self, x: AbstractExchange, body: bytes = b"", *, reply: bool = True, **headers: Any
    ) -> AbstractIncomingMessage | None:
        correlation = uuid.uuid4().hex
        await x.publish(
            aio_pika.Message(
                body,
                headers={f"x-fm-memo-{k}": v for k, v in headers.items()},
                reply_to=self.reply_to if reply else None,
                correlation_id=correlation,
            ),
            routing_key="",
        )
        if not reply:
            return None
        answer = await asyncio.wait_for(self.answers.get(), 10)
        assert answer.correlation_id == correlation
        return answer

    async def result(self, x: AbstractExchange, body: bytes = b"", **headers: Any) -> str:
        answer = await self.ask(x, body, **headers)
        assert answer is not None
        return str((answer.headers or {})["x-fm-memo-result"])

    async def clean(self) -> None:
        for x in self.exchanges:
            await x.delete()


@pytest.fixture
async def memos() -> AsyncIterator[Memos]:
    connection = await aio_pika.connect(AMQP_URL)
    m = Memos(await connection.channel())
    await m.start()
    try:
        yield m
    finally:
        await m.clean()
        await connection.close()


async def test_put_create_and_get_answer_by_reply(memos: Memos) -> None:
    x = await memos.exchange()
    assert await memos.result(x, op="get", key="k") == "none"
    assert await memos.result(x, b"one", op="create", key="k", ttl=60_000) == "stored"
    assert await memos.result(x, b"two", op="create", key="k", ttl=60_000) == "refused"
    found = await memos.ask(x, op="get", key="k")
    assert found is not None
    assert found.body == b"one"
    assert await memos.result(x, b"three", op="put", key="k", ttl=60_000) == "stored"
    found = await memos.ask(x, op="get", key="k")
    assert found is not None
    assert found.body == b"three"


async def test_a_request_without_reply_to_is_carried_out_unanswered(memos: Memos) -> None:
    x = await memos.exchange()
    await memos.ask(x, b"quiet", reply=False, op="put", key="k", ttl=60_000)
    found = await memos.ask(x, op="get", key="k")  # answers come in order: the put was done
    assert found is not None
    assert found.body == b"quiet"
    assert memos.answers.empty()


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ({"op": "get"}, "x-fm-memo-key"),
        ({"op": "get", "key": ""}, "x-fm-memo-key"),
        ({"op": "get", "key": "k" * 1025}, "x-fm-memo-key"),
        ({"op": "delete", "key": "k"}, "x-fm-memo-op"),
        ({"key": "k"}, "x-fm-memo-op"),
        ({"op": "put", "key": "k"}, "x-fm-memo-ttl"),
        ({"op": "put", "key": "k", "ttl": 0}, "x-fm-memo-ttl"),
        ({"op": "create", "key": "k", "ttl": 604_800_001}, "x-fm-memo-ttl"),
        ({"op": "put", "key": "k", "ttl": "60"}, "x-fm-memo-ttl"),
    ],
)
async def test_a_request_it_cannot_carry_out_is_answered_with_why(
    memos: Memos, headers: dict[str, Any], why: str
) -> None:
    x = await memos.exchange()
    answer = await memos.ask(x, b"v", **headers)
    assert answer is not None
    assert answer.headers is not None
    assert answer.headers["x-fm-memo-result"] == "error"
    assert why in str(answer.headers["x-fm-memo-error"])
    assert await memos.result(x, op="get", key="k") == "none"  # nothing was stored


def batch(*requests: tuple[int, str, int, bytes]) -> bytes:
    """A batch request's body: (op, key, ttl ms, value) each."""
    return b"".join(
        struct.pack(">BH", op, len(key.encode())) + key.encode()
        + struct.pack(">II", ttl, len(value)) + value
        for op, key, ttl, value in requests
    )  # fmt: skip


def batch_answers(body: bytes) -> list[tuple[int, bytes]]:
    out, at = [], 0
    while at < len(body):
        code, size = struct.unpack_from(">BI", body, at)
        out.append((code, body[at + 5 : at + 5 + size]))
        at += 5 + size
    return out


async def test_a_batch_answers_each_request_in_order_its_gets_after_its_writes(
    memos: Memos,
) -> None:
    x = await memos.exchange()
    assert await memos.result(x, b"old", op="put", key="held", ttl=60_000) == "stored"
    body = batch(
        (3, "k", 0, b""),  # get: sees the put later in the batch
        (2, "k", 60_000, b"first"),  # create: stored
        (2, "k", 60_000, b"again"),  # create of the same key: refused
        (2, "held", 60_000, b"new"),  # create over an unexpired memo: refused
        (1, "held", 60_000, b"put"),  # put: replaces
        (3, "none", 0, b""),
    )
    answer = await memos.ask(x, body, op="batch")
    assert answer is not None
    assert (answer.headers or {})["x-fm-memo-result"] == "batch"
    assert batch_answers(answer.body) == [
        (3, b"first"), (1, b""), (2, b""), (2, b""), (1, b""), (4, b""),
    ]  # fmt: skip
    assert await memos.result(x, op="get", key="held") == "found"
    got = await memos.ask(x, op="get", key="held")
    assert got is not None
    assert got.body == b"put"


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (batch((9, "k", 0, b"")), "op is 1 put, 2 create or 3 get"),
        (batch((1, "k", 0, b"v")), "ttl is 1 to 604800000"),
        (batch((1, "", 60_000, b"v")), "key is a string of 1 to 1024 bytes"),
        (batch((1, "k", 60_000, b"v" * 131_073)), "at most 131072 bytes"),
        (batch((1, "k", 60_000, b"v"))[:-1], "a malformed batch"),
        (batch(*[(3, "k", 0, b"")] * 1001), "at most 1000 requests"),
    ],
)
async def test_a_batch_with_a_bad_request_is_refused_whole(
    memos: Memos, body: bytes, why: str
) -> None:
    x = await memos.exchange()
    good = batch((1, "written", 60_000, b"v"))
    answer = await memos.ask(x, good + body, op="batch")
    assert answer is not None
    assert (answer.headers or {})["x-fm-memo-result"] == "error"
    assert why in str((answer.headers or {})["x-fm-memo-error"])
    assert await memos.result(x, op="get", key="written") == "none"  # nothing of it stored


async def test_a_value_over_128_kib_is_refused(memos: Memos) -> None:
    x = await memos.exchange()
    assert await memos.result(x, b"v" * 131_073, op="put", key="k", ttl=60_000) == "error"
    assert await memos.result(x, b"v" * 131_072, op="put", key="k", ttl=60_000) == "stored"


async def test_writes_drop_expired_memos_nobody_reads(memos: Memos) -> None:
    x = await memos.exchange(**{"x-memo-persistence": "memory"})
    for i in range(50):
        assert await memos.result(x, b"v", op="put", key=f"short-{i}", ttl=1500) == "stored"
    assert await rows("fm_memos", x) == 50
    await wait_until(lambda: _gone(memos, x, "short-49"), timeout=10, what="the last expiry")
    assert await rows("fm_memos", x) == 50  # a get drops nothing
    for i in range(4):  # each write drops up to 16 expired ones
        assert await memos.result(x, b"v", op="put", key=f"long-{i}", ttl=60_000) == "stored"
    assert await rows("fm_memos", x) == 4


async def test_memos_of_exchanges_are_apart_and_go_with_their_exchange(memos: Memos) -> None:
    one, two = await memos.exchange(), await memos.exchange()
    assert await memos.result(one, b"1", op="put", key="k", ttl=60_000) == "stored"
    assert await memos.result(two, b"2", op="put", key="j", ttl=60_000) == "stored"
    assert await memos.result(two, op="get", key="k") == "none"
    assert await rows("fm_memos", one) == 1
    await one.delete()
    memos.exchanges.remove(one)
    assert await rows("fm_memos", one) == 0  # deleted with the exchange, in the same call
    assert await rows("fm_memos", two) == 1
    again = await memos.channel.declare_exchange(one.name, type="x-fm-memos")
    memos.exchanges.append(again)
    assert await memos.result(again, op="get", key="k") == "none"


async def test_a_disk_exchange_keeps_its_memos_in_the_disk_table(memos: Memos) -> None:
    x = await memos.exchange(**{"x-memo-persistence": "disk"})
    assert await memos.result(x, b"d", op="put", key="k", ttl=60_000) == "stored"
    assert (await rows("fm_memos_disk", x), await rows("fm_memos", x)) == (1, 0)


async def test_an_unknown_persistence_or_another_one_is_refused(memos: Memos) -> None:
    with pytest.raises(ChannelPreconditionFailed, match="x-memo-persistence"):
        await memos.channel.declare_exchange(
            f"fmtest-memos-{uuid.uuid4().hex[:8]}",
            type="x-fm-memos",
            arguments={"x-memo-persistence": "tape"},
        )


async def test_a_redeclaration_with_another_persistence_is_refused() -> None:
    connection = await aio_pika.connect(AMQP_URL)
    name = f"fmtest-memos-{uuid.uuid4().hex[:8]}"
    try:
        channel = await connection.channel()
        x = await channel.declare_exchange(
            name, type="x-fm-memos", arguments={"x-memo-persistence": "memory"}
        )
        with pytest.raises(ChannelPreconditionFailed, match="x-memo-persistence"):
            await (await connection.channel()).declare_exchange(
                name, type="x-fm-memos", arguments={"x-memo-persistence": "disk"}
            )
        await x.delete()
    finally:
        await connection.close()


async def _gone(memos: Memos, x: AbstractExchange, key: str) -> bool:
    return await memos.result(x, op="get", key=key) == "none"


async def rows(table: str, x: AbstractExchange) -> int:
    """The rows of exchange ``x`` in a memo table on the node (rabbitmqctl eval)."""
    name = f'{{resource, <<"/">>, exchange, <<"{x.name}">>}}'
    pattern = "{fm_memo, {" + name + ", '_'}, '_', '_', '_'}"
    proc = await asyncio.create_subprocess_exec(
        "rabbitmqctl", "--quiet", "eval", f"length(mnesia:dirty_match_object({table}, {pattern})).",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate()
    return int(out.strip())

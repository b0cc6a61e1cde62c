"""The adapter's own pull requests: none lingers, a receive waiting asks again, and
what arrived but was never handed over goes back on close."""

from __future__ import annotations

import asyncio

import pytest

from framework_m_core.testing import PROMPT, wait_until
from framework_m_nats import NatsBroker
from framework_m_nats.testing import NatsNamespace

pytestmark = pytest.mark.anyio


async def test_a_receive_that_got_less_than_it_asked_for_leaves_no_request_open(
    broker: NatsBroker, namespace: NatsNamespace
) -> None:
    await broker.enqueue("job", i=0)
    [first] = await broker.receive(10, PROMPT)  # asked for 10, one was there
    for i in range(1, 4):
        await broker.enqueue("job", i=i)
    async with NatsBroker.from_url(namespace.url()) as other:
        got = []
        async with asyncio.timeout(PROMPT):
            while len(got) < 3:
                got += await other.receive(10, PROMPT)
        await asyncio.gather(*(other.ack(d) for d in got))
    await broker.ack(first)
    assert broker._puller is not None
    assert broker._puller.buffered == 0


async def test_a_waiting_receive_asks_again_when_its_request_ends(broker: NatsBroker) -> None:
    # The first request ends (408) at about the receive's own deadline: a receive made
    # while it was open asks for nothing more, then must ask once it ended.
    assert await broker.receive(5, 0.3) == []
    puller = broker._puller
    assert puller is not None
    asked = puller._count
    waiting = asyncio.create_task(broker.receive(5, PROMPT))
    await wait_until(lambda: puller._count > asked)
    await broker.enqueue("job")
    async with asyncio.timeout(PROMPT):
        [delivery] = await waiting
    await broker.ack(delivery)


async def test_messages_that_arrived_unasked_for_go_back_on_close(
    namespace: NatsNamespace,
) -> None:
    async with NatsBroker.from_url(namespace.url()) as setup:
        await setup.sync_schema()
        for i in range(3):
            await setup.enqueue("job", i=i)
    broker = NatsBroker.from_url(namespace.url())
    await broker.connect()
    assert await broker.receive(1, 0.05) != []  # binds the consumer; one taken
    puller = broker._puller
    assert puller is not None
    await puller._ask(2, PROMPT)  # as a request whose receive gave up would leave them
    await wait_until(lambda: puller.buffered == 2)
    await broker.close()
    async with NatsBroker.from_url(namespace.url()) as other:
        back = []
        async with asyncio.timeout(PROMPT):  # well before ack_wait: handed back, not lost
            while len(back) < 3:
                back += await other.receive(10, PROMPT)
        await asyncio.gather(*(other.ack(d) for d in back))

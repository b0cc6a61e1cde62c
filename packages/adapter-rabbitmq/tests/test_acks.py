"""The acks of one event-loop pass: one multiple ack for the run at the channel's head,
never past a delivery still running; single acks for the rest."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from framework_m_core.ports.messages import decode_message
from framework_m_core.testing import PROMPT, receive_all
from framework_m_rabbitmq import RabbitBroker
from framework_m_rabbitmq.received import Received
from framework_m_rabbitmq.testing import RabbitNamespace

pytestmark = pytest.mark.anyio


@pytest.fixture
def acks_sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """Every basic.ack the adapter writes, as (delivery tag, multiple)."""
    sent: list[tuple[int, bool]] = []
    original = Received.ack

    async def ack(self: Received, multiple: bool = False) -> None:
        sent.append((self.delivery_tag or 0, multiple))
        await original(self, multiple=multiple)

    monkeypatch.setattr(Received, "ack", ack)
    return sent


async def _enqueue(broker: RabbitBroker, n: int) -> None:
    for i in range(n):
        await broker.enqueue("job", n=i)


async def test_a_run_at_the_head_goes_in_one_multiple_ack_that_stops_at_a_running_job(
    namespace: RabbitNamespace, acks_sent: list[tuple[int, bool]]
) -> None:
    url = namespace.url()
    async with RabbitBroker.from_url(url) as broker:
        await broker.sync_schema()
        await _enqueue(broker, 6)
        got = sorted(await receive_all(broker, timeout=PROMPT, ack=False), key=_tag)
        assert len(got) == 6
        done = [got[0], got[1], got[2], got[4]]  # got[3] and got[5] still running
        await asyncio.gather(*(broker.ack(d) for d in done))
        assert acks_sent == [(_tag(got[2]), True), (_tag(got[4]), False)]
        for d in done:  # acked already, by the multiple ack or its own: nothing is sent
            await broker.ack(d)
        assert len(acks_sent) == 2
        await broker.ack(got[3])  # the channel is fine: a single ack of its own
        assert acks_sent[2:] == [(_tag(got[3]), False)]
        running = decode_message(got[5].body).id
    async with RabbitBroker.from_url(url) as other:  # released on close: got[5] alone
        back = await receive_all(other, timeout=PROMPT)
        assert [decode_message(d.body).id for d in back] == [running]


async def test_a_lone_ack_and_a_run_behind_an_unacked_head_go_one_by_one(
    namespace: RabbitNamespace, acks_sent: list[tuple[int, bool]]
) -> None:
    async with RabbitBroker.from_url(namespace.url()) as broker:
        await broker.sync_schema()
        await _enqueue(broker, 4)
        got = sorted(await receive_all(broker, timeout=PROMPT, ack=False), key=_tag)
        await broker.ack(got[0])
        await asyncio.gather(*(broker.ack(d) for d in got[2:]))  # got[1] still running
        assert acks_sent[0] == (_tag(got[0]), False)
        assert sorted(acks_sent[1:]) == [(_tag(got[2]), False), (_tag(got[3]), False)]
        await broker.ack(got[1])
        assert (await broker.queue_stats()).ready == 0


def _tag(delivery: Any) -> int:
    return int(delivery.handle.delivery_tag)


async def test_a_multiple_ack_stops_at_a_single_ack_another_pass_is_still_writing(
    namespace: RabbitNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[tuple[int, bool]] = []
    original = Received.ack
    held, head_sent = asyncio.Event(), asyncio.Event()
    slow: set[int] = set()

    async def ack(self: Received, multiple: bool = False) -> None:
        if self.delivery_tag in slow and not multiple:
            await held.wait()  # this pass's single ack is written late
        sent.append((self.delivery_tag or 0, multiple))
        await original(self, multiple=multiple)
        if multiple:
            head_sent.set()

    monkeypatch.setattr(Received, "ack", ack)
    async with RabbitBroker.from_url(namespace.url()) as broker:
        await broker.sync_schema()
        await _enqueue(broker, 6)
        got = sorted(await receive_all(broker, timeout=PROMPT, ack=False), key=_tag)
        t = [_tag(d) for d in got]
        slow.add(t[3])
        # one pass: the head run got[0..1] in one multiple ack, got[3] alone (held back)
        first = asyncio.gather(*(broker.ack(d) for d in (got[0], got[1], got[3])))
        await asyncio.wait_for(head_sent.wait(), PROMPT)
        assert sent == [(t[1], True)]
        # the next pass: got[2] and got[4] are at the head now but for got[3], whose
        # ack is being written: a multiple ack at got[4] would settle it first
        await asyncio.gather(broker.ack(got[2]), broker.ack(got[4]))
        held.set()
        await first
        assert (t[4], True) not in sent, sent
        await broker.ack(got[5])  # the channel is still open
        stats = await broker.queue_stats()
        assert stats.ready == 0
        assert all(not d.handle.closed for d in got)

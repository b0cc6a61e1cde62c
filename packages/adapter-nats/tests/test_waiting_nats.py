"""``waiting()`` on NATS: what a consumer holds is not listed, a moved delayed job once."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from framework_m_core.ports import Waiting, decode_message
from framework_m_core.testing import PROMPT, wait_until
from framework_m_nats import NatsBroker

pytestmark = pytest.mark.anyio


def _listed(found: Sequence[Waiting]) -> list[tuple[str, bool]]:
    return [(decode_message(w.body).id, w.due_at is None) for w in found]


async def test_a_delayed_job_moved_when_due_is_listed_once_as_due(broker: NatsBroker) -> None:
    later = await broker.enqueue_in(600, "later")
    soon = await broker.enqueue_in(0.3, "soon")  # moved out of order: after `later`
    assert _listed(await broker.waiting(10)) == [(soon, False), (later, False)]
    assert await broker.receive(1, 0.05) == []  # starts the mover; nothing due yet

    async def moved() -> bool:
        return _listed(await broker.waiting(10)) == [(soon, True), (later, False)]

    await wait_until(moved)
    [delivery] = await broker.receive(1, PROMPT)
    assert decode_message(delivery.body).id == soon
    assert _listed(await broker.waiting(10)) == [(later, False)]
    await broker.ack(delivery)


async def test_a_retry_held_by_the_consumer_is_not_listed(broker: NatsBroker) -> None:
    first, second = await broker.enqueue("job", i=1), await broker.enqueue("job", i=2)
    [delivery] = await broker.receive(1, PROMPT)
    assert decode_message(delivery.body).id == first
    await broker.retry(delivery, 60)
    assert _listed(await broker.waiting(10)) == [(second, True)]

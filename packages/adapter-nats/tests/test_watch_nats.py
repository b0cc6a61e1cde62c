"""A watch whose change message never came still returns within WATCH_DELAY: on a
cluster a write can reach a server before it learned of the watch's subscription, and a
write made while the connection is made again sends none."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from framework_m_core.ports.store import WATCH_DELAY, Record, Write
from framework_m_nats import NatsBroker

pytestmark = pytest.mark.anyio


async def test_a_watch_deaf_to_its_messages_sees_a_write_within_the_delay(
    broker: NatsBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    (one,) = await broker.store.write([Write("k", b"one")])
    nc = await broker._link()
    subscribe = nc.subscribe

    async def deaf(subject: str, **kwargs: Any) -> Any:  # subscribed, told nothing
        return await subscribe(subject)

    monkeypatch.setattr(nc, "subscribe", deaf)
    watching = asyncio.ensure_future(broker.store.watch("k", one, timeout=60))
    await asyncio.sleep(0.2)
    assert not watching.done()
    (two,) = await broker.store.write([Write("k", b"two")])
    wrote = time.monotonic()
    record = await asyncio.wait_for(watching, WATCH_DELAY + 5)
    assert record == Record(b"two", two)
    waited = time.monotonic() - wrote
    assert waited <= WATCH_DELAY, f"the write woke the watch after {waited:.2f}s"

"""``shared(broker)``: one per broker instance, and never what keeps a broker alive."""

from __future__ import annotations

import gc
import weakref

import pytest

from framework_m_core.adapters.memory import MemoryBroker, MemorySettings
from framework_m_core.control.shared import shared
from framework_m_core.testing import synced

pytestmark = pytest.mark.anyio


async def test_one_shared_state_per_broker_and_it_holds_no_broker(queue_name: str) -> None:
    broker = await synced(MemoryBroker(MemorySettings(queue_name, 120.0, 5.0)))
    assert shared(broker) is shared(broker)
    assert await shared(broker).acquire_lease("k", "holder", 5)
    other = await synced(MemoryBroker(MemorySettings(queue_name, 120.0, 5.0)))
    assert shared(other) is not shared(broker)
    assert not await shared(other).extend_lease("k", "holder")  # taken through the first
    await other.close()
    await broker.close()
    gone = weakref.ref(broker)
    del broker
    gc.collect()
    assert gone() is None, "a used shared state keeps its broker alive"

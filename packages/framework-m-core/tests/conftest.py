from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from framework_m_core.adapters.memory import MemoryBroker, MemorySettings, reset
from framework_m_core.testing import synced


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def queue_name() -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex}"
    yield name
    reset(name)


@pytest.fixture
async def memory(queue_name: str) -> MemoryBroker:
    broker = await synced(
        MemoryBroker(MemorySettings(queue_name, dedup_window=120.0, visibility_timeout=5.0))
    )
    return broker

"""Fixtures of the outbox's tests: a scratch database per test on each kind, and a
memory broker."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from framework_m_core.adapters.memory import MemoryBroker, MemorySettings, reset
from framework_m_core.testing import synced
from framework_m_outbox.testing import scratch_database

KINDS = ["postgresql", "mariadb", "sqlite"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=KINDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new database of each kind (sync driver URL), dropped after the test."""
    with scratch_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
async def memory() -> Iterator[MemoryBroker]:  # type: ignore[misc]
    name = f"t-{uuid.uuid4().hex}"
    broker = await synced(MemoryBroker(MemorySettings(name, dedup_window=120.0)))
    yield broker
    await broker.close()
    reset(name)

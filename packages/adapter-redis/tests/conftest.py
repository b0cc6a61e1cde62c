from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from framework_m_redis.testing import RedisNamespace

REDIS_URL = os.environ.get("M_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def namespace() -> AsyncIterator[RedisNamespace]:
    """A queue unique to the test; its keys are deleted after."""
    ns = RedisNamespace(REDIS_URL)
    yield ns
    await ns.drop()

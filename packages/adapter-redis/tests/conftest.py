from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from framework_m_redis.testing import delete_queue, isolated_url

REDIS_URL = os.environ.get("M_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def redis_namespace() -> AsyncIterator[Callable[..., str]]:
    """URLs for a queue unique to the test; its keys are deleted after."""
    tag = uuid.uuid4().hex[:12]

    def url(server: str = REDIS_URL, **options: object) -> str:
        return isolated_url(server, tag, **options)

    yield url
    await delete_queue(REDIS_URL, tag)

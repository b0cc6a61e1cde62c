from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from framework_m_nats.testing import delete_streams, isolated_url

NATS_URL = os.environ.get("M_TEST_NATS_URL", "nats://127.0.0.1:4222")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def nats_namespace() -> AsyncIterator[Callable[..., str]]:
    """URLs for a stream, prefix and consumer unique to the test; streams deleted after."""
    tag = uuid.uuid4().hex[:12]

    def url(server: str = NATS_URL, **options: object) -> str:
        return isolated_url(server, tag, **options)

    yield url
    await delete_streams(NATS_URL, tag)

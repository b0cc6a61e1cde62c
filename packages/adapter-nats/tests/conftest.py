from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable

import nats
import pytest

NATS_URL = os.environ.get("M_TEST_NATS_URL", "nats://127.0.0.1:4222")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def delete_streams(server: str, *names: str) -> None:
    nc = await nats.connect(server)
    try:
        js = nc.jetstream()
        for name in names:
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.delete_stream(name)
    finally:
        await nc.close()


@pytest.fixture
async def nats_namespace() -> AsyncIterator[Callable[..., str]]:
    """URLs for a stream, prefix and consumer unique to the test; streams deleted after."""
    tag = uuid.uuid4().hex[:12]
    stream = f"fmtest_{tag}"

    def url(server: str = NATS_URL, **options: object) -> str:
        opts = {
            "stream": stream,
            "subject_prefix": f"fmtest.{tag}",
            "consumer": f"fmtest_{tag}_workers",
            **options,
        }
        return server + "?" + "&".join(f"{k}={v}" for k, v in opts.items())

    yield url
    await delete_streams(NATS_URL, stream, f"{stream}_dead")

"""Fixtures shared by the RabbitMQ adapter's tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"

"""Real `m worker` replicas on the machine's RabbitMQ, killed with real signals."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from framework_m_rabbitmq.testing import delete_topology, isolated_url

from .conftest import MProcess
from .scenarios import killed_job_scenario

pytestmark = pytest.mark.slow

AMQP = "amqp://guest:guest@127.0.0.1:5672/"


@pytest.fixture
def tag() -> Iterator[str]:
    tag = uuid.uuid4().hex[:12]
    yield tag
    asyncio.run(delete_topology(AMQP, tag))


def test_five_replicas_two_killed_every_slot_once_and_the_killed_job_completes(
    run_m: Callable[..., MProcess], tmp_path: Path, tag: str
) -> None:
    killed_job_scenario(run_m, tmp_path, isolated_url(AMQP, tag))

"""Fixtures of the repository's multi-process tests: processes, and servers of their own."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from framework_m_core.testing.scenarios import Processes, processes

from .brokers import RabbitServer

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def procs() -> Iterator[Processes]:
    """Processes started in the repository; any still running at the end are SIGKILLed."""
    with processes(REPO) as started:
        yield started


@pytest.fixture(scope="session")
def rabbit_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitServer]:
    """A RabbitMQ node of the tests' own (TLS listener, management API), for the session."""
    server = RabbitServer(tmp_path_factory.mktemp("rabbit"), tls=True)
    server.start()
    yield server
    server.stop(signal.SIGKILL)

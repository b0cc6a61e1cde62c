"""A redis-server of the test's own, configured the way the adapter warns about."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from framework_m_core.testing.scenarios import RECORDER_APP, Processes

from .brokers import RedisServer

pytestmark = pytest.mark.slow


def test_an_evicting_redis_is_reported(procs: Processes, tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    server.start("--maxmemory-policy", "allkeys-lru")
    try:
        worker = procs.m("worker", "--app", RECORDER_APP, "--broker", server.url, "--no-scheduler")
        worker.wait_for(r"maxmemory-policy is allkeys-lru: Redis may evict dedup keys")
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    finally:
        server.stop(signal.SIGKILL)

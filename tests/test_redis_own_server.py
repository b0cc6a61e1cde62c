"""A redis-server of the test's own, configured the way the adapter warns about."""

from __future__ import annotations

import re
import signal
import subprocess
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


@pytest.mark.parametrize(
    ("denied", "says"),
    [
        ("-@scripting", "may not run Lua scripts .*needs the ACL category \\+@scripting"),
        (
            "-@sortedset",
            "may not run ZADD, ZRANGE, ZRANGEBYSCORE, ZREM, ZREMRANGEBYSCORE on the keys fm:",
        ),
        ("-xautoclaim", "may not run XAUTOCLAIM on the keys .*grant @stream"),
    ],
)
def test_an_acl_user_missing_a_permission_is_refused_at_start(
    procs: Processes, tmp_path: Path, denied: str, says: str
) -> None:
    server = RedisServer(tmp_path)
    server.start()
    try:
        subprocess.run(
            ["redis-cli", "-p", str(server.port), "ACL", "SETUSER", "app", "on", ">pw",
             "~*", "&*", "+@all", denied],
            check=True, capture_output=True,
        )  # fmt: skip
        url = server.url.replace("redis://", "redis://app:pw@")
        worker = procs.m("worker", "--app", RECORDER_APP, "--broker", url)
        assert worker.wait(timeout=30) != 0
        assert re.search(says, worker.output), worker.output
        assert "Traceback" not in worker.output
    finally:
        server.stop(signal.SIGKILL)

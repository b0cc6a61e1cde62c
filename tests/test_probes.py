"""``m worker --http``: /healthz and /readyz of real worker processes."""

from __future__ import annotations

import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from framework_m_core.testing.proxy import free_port
from framework_m_core.testing.scenarios import RECORDER_APP, Processes

from .brokers import RedisServer
from .test_worker_process import CRASHING_APP, on_path

pytestmark = pytest.mark.slow


def get(port: int, path: str) -> tuple[int, str]:
    """Status and body; 0 when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def wait_for(port: int, path: str, status: int, timeout: float = 20) -> tuple[float, str]:
    """Poll until ``path`` answers ``status``; when it did (monotonic) and its body."""
    deadline = time.monotonic() + timeout
    while True:
        got, body = get(port, path)
        if got == status:
            return time.monotonic(), body
        assert time.monotonic() < deadline, f"{path} still {got} {body!r}, not {status}"
        time.sleep(0.1)


def test_readyz_follows_the_broker_and_healthz_the_worker(procs: Processes, tmp_path: Path) -> None:
    server = RedisServer(tmp_path, persist=True)  # the group must survive the restart
    server.start()
    port = free_port()
    try:
        worker = procs.m(
            "worker", "--app", RECORDER_APP, "--broker", server.url, "--no-scheduler",
            "--http", f"127.0.0.1:{port}",
        )  # fmt: skip
        wait_for(port, "/readyz", 200)
        assert get(port, "/healthz") == (200, "ok")
        server.stop()
        _, why = wait_for(port, "/readyz", 503)
        assert why.startswith("the broker is out of reach")
        assert get(port, "/healthz") == (200, "ok")  # alive: it waits for the broker
        server.start()
        wait_for(port, "/readyz", 200, timeout=30)
        assert get(port, "/nothing")[0] == 404
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    finally:
        server.stop(signal.SIGKILL)


def test_healthz_fails_within_two_seconds_of_the_ticker_dying(
    procs: Processes, tmp_path: Path
) -> None:
    (tmp_path / "crashing.py").write_text(CRASHING_APP)
    port = free_port()
    worker = procs.m(
        "worker", "--app", "crashing", "--http", f"127.0.0.1:{port}", env=on_path(tmp_path)
    )
    wait_for(port, "/healthz", 200)
    worker.wait_for(r"the ticker died; stopping the worker", timeout=20)
    died = time.monotonic()
    deadline = died + 2
    while get(port, "/healthz")[0] == 200:
        assert time.monotonic() < deadline, "healthz still 200 two seconds after the ticker died"
        time.sleep(0.05)
    assert worker.wait(timeout=10) != 0


def test_a_bad_address_is_refused(procs: Processes) -> None:
    worker = procs.m("worker", "--app", "examples.heartbeat", "--http", "8080")
    assert worker.wait(timeout=20) == 2
    assert "m: error: --http must be HOST:PORT, e.g. 0.0.0.0:8080, got '8080'" in worker.output

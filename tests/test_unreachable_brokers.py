"""`m worker` against a broker that is not there (yet): it waits, says so, and starts when
the broker answers; `--connect-timeout` makes it give up with exit code 3."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from framework_m_core.testing.proxy import free_port
from framework_m_core.testing.scenarios import Processes

from .brokers import RedisServer
from .conftest import REPO
from .test_probes import get, wait_for


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "nats://127.0.0.1:1",
            "cannot connect to nats://127.0.0.1:1: nats: no servers available for connection",
        ),
        ("redis://127.0.0.1:1/0", "cannot connect to redis://127.0.0.1:1/0: "),
    ],
)
def test_connect_timeout_gives_up_with_exit_code_3(url: str, message: str) -> None:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "framework_m_core", "worker", "--app", "examples.heartbeat",
         "--broker", url, "--connect-timeout", "2"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("m: error: gave up after 2s (--connect-timeout) and ")
    assert message in last
    assert "broker out of reach at start" in result.stderr  # each attempt is logged
    assert time.monotonic() - started < 30


def test_a_worker_started_before_its_broker_starts_when_it_answers(
    procs: Processes, tmp_path: Path
) -> None:
    server = RedisServer(tmp_path)
    port = free_port()
    try:
        worker = procs.m(
            "worker", "--app", "examples.heartbeat", "--broker", server.url,
            "--http", f"127.0.0.1:{port}",
        )  # fmt: skip
        worker.wait_for(r"broker out of reach at start .*; trying again in")
        _, why = wait_for(port, "/readyz", 503)
        assert why.startswith("starting: the broker is out of reach: cannot connect to")
        assert get(port, "/healthz") == (200, "starting")  # alive: it waits for the broker
        server.start()
        wait_for(port, "/readyz", 200, timeout=30)
        worker.wait_for(r"every_second slot=", timeout=20)
        assert worker.matches(r"the broker answered \(attempt \d+\)")
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    finally:
        server.stop(signal.SIGKILL)


def test_a_worker_waiting_for_its_broker_stops_on_sigterm(procs: Processes) -> None:
    worker = procs.m("worker", "--app", "examples.heartbeat", "--broker", "redis://127.0.0.1:1/0")
    worker.wait_for(r"broker out of reach at start")
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=10) == 0


NATS, REDIS, RABBITMQ = "127.0.0.1:4222", "127.0.0.1:6379", "127.0.0.1:5672"


@pytest.mark.parametrize(
    ("url", "answered"),
    [
        (f"redis://{NATS}/0", f"{NATS} answered as a NATS server, not Redis"),
        (f"redis://{RABBITMQ}/0", f"{RABBITMQ} answered as an AMQP server, not Redis"),
        (f"nats://{REDIS}", f"{REDIS} answered as a Redis server, not NATS"),
        (f"nats://{RABBITMQ}", f"{RABBITMQ} answered as an AMQP server, not NATS"),
        (f"amqp://guest:guest@{REDIS}/", f"{REDIS} answered as a Redis server, not RabbitMQ"),
        (f"amqp://guest:guest@{NATS}/", f"{NATS} answered as a NATS server, not RabbitMQ"),
    ],
    ids=["redis-at-nats", "redis-at-rabbitmq", "nats-at-redis", "nats-at-rabbitmq",
         "amqp-at-redis", "amqp-at-nats"],
)  # fmt: skip
def test_another_broker_on_the_url_s_port_is_named_and_exits_2_at_once(
    procs: Processes, url: str, answered: str
) -> None:
    started = time.monotonic()
    worker = procs.m("worker", "--app", "examples.heartbeat", "--broker", url)
    status = procs.m("status", "--broker", url)
    enqueue = procs.m("enqueue", "heartbeat", "--broker", url)
    for command in (worker, status, enqueue):
        assert command.wait(timeout=15) == 2, command.output
        last = command.lines[-1]
        assert last.startswith(f"m: error: {answered}: is the URL's port the one "), last
        assert "out of reach" not in command.output  # not waited for
    assert status.lines == enqueue.lines == [last]  # one line, and nothing else
    assert time.monotonic() - started < 8  # the three ran side by side

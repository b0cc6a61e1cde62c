"""/metrics of three ticking replicas on each real broker: every slot enqueued once."""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from framework_m_core.testing import namespace
from framework_m_core.testing.proxy import free_port
from framework_m_core.testing.scenarios import RECORDER_APP, Processes

pytestmark = pytest.mark.slow

SERVERS = [
    "nats://127.0.0.1:4222",
    "redis://127.0.0.1:6379/0",
    "amqp://guest:guest@127.0.0.1:5672/",
]
SAMPLE = re.compile(r"^(frameworkm_\w+)(?:\{([^}]*)\})? ([0-9.e+]+)$", re.M)


def exposition(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return str(reply.read().decode())


def scrape(port: int) -> dict[tuple[str, str], float]:
    text = exposition(port)
    return {(name, labels): float(value) for name, labels, value in SAMPLE.findall(text)}


def late_in_a_second() -> float:
    """Wait until 0.75 s past a whole second (a slot's publish is usually done, the
    next's not begun); return that second."""
    while not 0.75 <= time.time() % 1 < 0.95:
        time.sleep(0.01)
    return float(int(time.time()))


LAST_SLOT = ("frameworkm_tick_last_slot_timestamp_seconds", 'schedule="record"')


def settled(
    ports: list[int], timeout: float = 30.0
) -> tuple[float, list[dict[tuple[str, str], float]]]:
    """Scrapes of every replica taken within one second, once each of them has counted
    that second's slot (a loaded broker may take longer than the second's first 0.75 s to
    answer a publish); return the second and the scrapes."""
    deadline = time.monotonic() + timeout
    while True:
        second = late_in_a_second()
        samples = [scrape(p) for p in ports]
        same_second = int(time.time()) == second
        if same_second and all(s.get(LAST_SLOT) == second for s in samples):
            return second, samples
        assert time.monotonic() < deadline, "the replicas never counted one second's slot"


def ticks(sample: dict[tuple[str, str], float], outcome: str) -> float:
    return sample.get(("frameworkm_ticks_total", f'outcome="{outcome}",schedule="record"'), 0.0)


@pytest.mark.parametrize("server", SERVERS, ids=["nats", "redis", "rabbitmq"])
def test_three_replicas_count_each_slot_once_between_two_scrapes(
    procs: Processes, server: str, tmp_path: Path
) -> None:
    ns = namespace(server)
    ports = [free_port() for _ in range(3)]
    try:
        for port in ports:
            procs.m(
                "worker", "--app", RECORDER_APP, "--broker", ns.url(),
                "--http", f"127.0.0.1:{port}", env={"FM_SLOT_LOG": str(tmp_path / "slots")},
            )  # fmt: skip
        for w in procs.started:
            w.wait_for("worker starting: role=ticker", timeout=30)
        first_at, first = settled(ports)
        time.sleep(1.5)
        last_at, last = settled(ports)
        slots = last_at - first_at
        assert slots >= 2
        enqueued = sum(
            ticks(b, "enqueued") - ticks(a, "enqueued") for a, b in zip(first, last, strict=True)
        )
        assert enqueued == slots, "each slot enqueued first by exactly one replica"
        for a, b in zip(first, last, strict=True):  # each replica met every slot once
            seen = ticks(b, "enqueued") + ticks(b, "duplicate")
            assert seen - ticks(a, "enqueued") - ticks(a, "duplicate") == slots
            assert b[LAST_SLOT] == last_at
            assert ticks(b, "failed") == ticks(b, "skipped") == 0
            assert b[("frameworkm_broker_connected", "")] == 1
            depth = {
                labels.rsplit("state=", 1)[1]: value
                for (name, labels), value in b.items()
                if name == "frameworkm_queue_messages"
            }  # the broker's own counts: the record jobs run at once, none fail
            assert depth['"dead"'] == 0
            assert 0 <= depth['"ready"'] <= 3
        lint = promtool_check(exposition(ports[0]))
        assert lint == "", f"promtool check metrics: {lint}"
        for w in procs.started:
            w.signal(signal.SIGTERM)
        for w in procs.started:
            assert w.wait() == 0
    finally:
        asyncio.run(ns.drop())


def promtool_check(text: str) -> str:
    """What ``promtool check metrics`` says of an exposition (nothing when it passes)."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install prometheus (.ci/run does)"
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    return (done.stdout + done.stderr).strip() if done.returncode else ""

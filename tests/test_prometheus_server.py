"""A real Prometheus server (Debian's) scrapes real ``m worker`` processes with a plain
``static_configs`` job and the shipped ``deploy/prometheus/rules.yml``: a healthy fleet
fires nothing, one stalled schedule among three fires its own stall alert alone, and
with every replica stopped the fleet-down alert fires within its ``for`` window."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from framework_m_core.testing import namespace
from framework_m_core.testing.proxy import free_port
from framework_m_core.testing.scenarios import Process, Processes

from .conftest import REPO
from .test_clock_skew import skewed

pytestmark = pytest.mark.slow

REDIS = "redis://127.0.0.1:6379/0"
RULES = REPO / "deploy" / "prometheus" / "rules.yml"
FOR_WINDOW = 60.0  # the `for` of FrameworkMScheduleStalled and FrameworkMFleetDown
SLACK = 20.0  # scrapes, evaluations and a loaded machine on top of it

# Every replica can run every job (they share one queue); each ticks only its own.
APP = """
from framework_m_core import App, JobContext

app = App()


async def run(ctx: JobContext) -> None:
    pass


for name in ("alpha", "beta", "gamma"):
    app.job(name=name, every=1 if name in {scheduled!r} else None)(run)
"""


def _app(directory: Path, module: str, scheduled: set[str]) -> None:
    (directory / f"{module}.py").write_text(APP.replace("{scheduled!r}", repr(scheduled)))


class Prometheus:
    """A Prometheus server of the test's own, scraping ``targets`` every second."""

    def __init__(self, procs: Processes, home: Path, targets: list[str]) -> None:
        binary = shutil.which("prometheus")
        assert binary, "prometheus is missing: apt-get install prometheus (.ci/run does)"
        config = {
            "global": {
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "evaluation_interval": "1s",
            },
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {"job_name": "framework-m", "static_configs": [{"targets": targets}]}
            ],
        }
        (home / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self.url = f"http://127.0.0.1:{free_port()}"
        self.process = procs.start(
            binary,
            f"--config.file={home / 'prometheus.yml'}",
            f"--storage.tsdb.path={home / 'data'}",
            f"--web.listen-address={self.url.removeprefix('http://')}",
        )
        poll("Prometheus ready", lambda: self._get("/-/ready", raw=True) is not None, 60)

    def _get(self, path: str, *, raw: bool = False) -> Any:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as reply:
                body = reply.read()
        except OSError:
            assert self.process.proc.poll() is None, self.process.output[-2000:]
            return None
        return body if raw else json.loads(body)["data"]

    def alerts(self) -> list[tuple[str, str, dict[str, str]]]:
        """(alertname, state, labels) of every alert pending or firing now."""
        data = self._get("/api/v1/alerts")
        assert data is not None, "Prometheus did not answer"
        return [(a["labels"]["alertname"], a["state"], a["labels"]) for a in data["alerts"]]

    def firing(self, name: str) -> list[dict[str, str]]:
        return [labels for n, state, labels in self.alerts() if n == name and state == "firing"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self._get("/api/v1/query?query=" + urllib.parse.quote(expr))
        assert data is not None, "Prometheus did not answer"
        return list(data["result"])

    def evaluated_after(self, since: float) -> bool:
        """Whether the rules were evaluated after ``since`` (a unix time)."""
        groups = self._get("/api/v1/rules")["groups"]
        return bool(groups) and min(_unix(g["lastEvaluation"]) for g in groups) > since


def _unix(stamp: str) -> float:
    """A unix time from Prometheus's RFC 3339 with nanoseconds."""
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    at = datetime.fromisoformat(whole).replace(tzinfo=UTC).timestamp()
    return at + float(f"0.{fraction or 0}")


def poll(what: str, done: Callable[[], object], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s"
        time.sleep(0.25)


@pytest.fixture
def queue() -> Iterator[str]:
    ns = namespace(REDIS)
    try:
        yield ns.url()
    finally:
        asyncio.run(ns.drop())


@pytest.mark.timeout(400)
def test_alerts_under_a_real_prometheus(procs: Processes, tmp_path: Path, queue: str) -> None:
    _app(tmp_path, "ticks_ab", {"alpha", "beta"})
    _app(tmp_path, "ticks_c", {"gamma"})
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    }
    ports = [free_port(), free_port()]

    def worker(app: str, port: int, extra: dict[str, str] | None = None) -> Process:
        return procs.m(
            "worker",
            "--app",
            app,
            "--broker",
            queue,
            "--http",
            f"127.0.0.1:{port}",
            env={**env, **(extra or {})},
        )

    ab, c = worker("ticks_ab", ports[0]), worker("ticks_c", ports[1])
    for w in (ab, c):
        w.wait_for("worker starting: role=ticker", timeout=60)
    prom = Prometheus(procs, tmp_path, [f"127.0.0.1:{p}" for p in ports])

    # Healthy: both scraped, every schedule reported; then the rules say nothing.
    poll(
        "three schedules scraped from two targets",
        lambda: (
            len(prom.query("frameworkm_tick_next_slot_timestamp_seconds")) == 3
            and len(prom.query("up == 1")) == 2
        ),
        60,
    )
    scraped = prom.query("frameworkm_tick_next_slot_timestamp_seconds")
    assert {s["metric"]["schedule"] for s in scraped} == {"alpha", "beta", "gamma"}
    assert {s["metric"]["job"] for s in scraped} == {"framework-m"}  # the target's own
    healthy_from = time.time()
    poll("ten rounds of the rules", lambda: prom.evaluated_after(healthy_from + 10), 60)
    assert prom.alerts() == [], "a healthy fleet fires nothing"

    # gamma's only ticker runs ten minutes behind: its next slot stays in the past.
    c.signal(signal.SIGTERM)
    assert c.wait() == 0
    behind = worker("ticks_c", ports[1], skewed(-600))
    behind.wait_for("worker starting: role=ticker", timeout=60)
    stalled_at = time.monotonic()
    poll(
        "gamma's stall alert firing",
        lambda: prom.firing("FrameworkMScheduleStalled"),
        FOR_WINDOW + SLACK + 30,
    )
    assert time.monotonic() - stalled_at >= FOR_WINDOW - 5, "it fired before its for window"
    assert [a["schedule"] for a in prom.firing("FrameworkMScheduleStalled")] == ["gamma"]
    stalls = [labels for n, _, labels in prom.alerts() if n == "FrameworkMScheduleStalled"]
    assert [a["schedule"] for a in stalls] == ["gamma"], "alpha and beta tick on"
    assert not prom.firing("FrameworkMFleetDown")

    # Every replica stopped: their series go stale, and the fleet-down alert fires.
    for w in (ab, behind):
        w.signal(signal.SIGTERM)
    for w in (ab, behind):
        assert w.wait() == 0, w.output[-2000:]
    down_at = time.monotonic()
    poll(
        "the fleet-down alert firing",
        lambda: prom.firing("FrameworkMFleetDown"),
        FOR_WINDOW + SLACK,
    )
    assert time.monotonic() - down_at >= FOR_WINDOW - 5, "it fired before its for window"

"""A replica whose clock is off (libfaketime) says so, stops ticking, and still runs jobs."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from framework_m_core.testing import namespace
from framework_m_core.testing.scenarios import Processes

pytestmark = pytest.mark.slow

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
REDIS = "redis://127.0.0.1:6379/0"
SLOT_LINE = r"every_second slot=(\d+)"


def skewed(seconds: int) -> dict[str, str]:
    """The environment of a process whose wall clock is ``seconds`` off (monotonic is not)."""
    assert LIBFAKETIME.exists(), "libfaketime is missing: apt-get install faketime"
    return {
        "LD_PRELOAD": str(LIBFAKETIME),
        "FAKETIME": f"{seconds:+d}",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_DONT_RESET": "1",
    }


def test_a_replica_200s_ahead_stops_ticking_and_still_runs_jobs(procs: Processes) -> None:
    ns = namespace(REDIS)
    url = ns.url()
    try:
        ahead = procs.m("worker", "--app", "examples.heartbeat", "--broker", url, env=skewed(200))
        # 200 s less what the broker's answer took (the measure is bounded by it)
        ahead.wait_for(r"this clock is (199\.[5-9]|200\.\d)s ahead of the broker's, more than")
        assert "not ticking until it is back" in ahead.output
        kwargs = '{"to": "ada", "subject": "hi"}'
        assert procs.m("enqueue", "send_email", "--broker", url, "--kwargs", kwargs).wait() == 0
        ahead.wait_for(r"sending 'hi' to ada")  # it still consumes
        on_time = procs.m("worker", "--app", "examples.heartbeat", "--broker", url)
        deadline = time.monotonic() + 20  # slots run on either replica
        while len(ahead.matches(SLOT_LINE) + on_time.matches(SLOT_LINE)) < 4:
            assert time.monotonic() < deadline, on_time.output
            time.sleep(0.1)
        for p in (ahead, on_time):
            p.signal(signal.SIGTERM)
            assert p.wait() == 0
        slots = [int(m.group(1)) for p in (ahead, on_time) for m in p.matches(SLOT_LINE)]
        assert len(slots) >= 4, slots
        assert len(slots) == len(set(slots)), f"a slot ran twice: {sorted(slots)}"
        assert max(slots) <= time.time() + 1, "the replica ahead enqueued its future slots"
        assert ahead.matches(r"ticker stopped: 0 published")
    finally:
        asyncio.run(ns.drop())

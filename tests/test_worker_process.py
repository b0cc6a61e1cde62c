"""Real ``m worker`` processes on the embedded broker, stopped with real signals."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest

from framework_m_core import open_broker
from framework_m_core.testing import namespace
from framework_m_core.testing.scenarios import Processes

pytestmark = pytest.mark.slow

SLOT_LINE = r"every_second slot=(\d+) scheduled_at=(\S+ \S+)"
SKIPPED_LINE = r"every_second: (\d+) slot\(s\) from (\S+) on were not enqueued: superseded"
UNRUN_LINE = r"every_second\[\S+\] (?:expired: .*\(slot (\d+)\)|skipped: slot (\d+) came)"


def test_one_second_schedule_runs_once_per_second(procs: Processes) -> None:
    worker = procs.m("worker", "--app", "examples.heartbeat")
    worker.wait_for(r"worker starting: role=ticker\+worker broker=memory://default")
    found = worker.wait_for(SLOT_LINE, count=6, timeout=20)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    slots = [int(m.group(1)) for m in worker.matches(SLOT_LINE)]
    assert len(found) >= 6
    # A stall longer than a second (a loaded machine) makes the next slot supersede
    # the one it delayed; the worker says which. No slot goes missing unsaid.
    said = [
        first + n
        for first, count in (
            (int(datetime.fromisoformat(m.group(2)).timestamp()), int(m.group(1)))
            for m in worker.matches(SKIPPED_LINE)
        )
        for n in range(count)
    ]
    # A slot stored past its grace (expired) or come while the previous run still went
    # on (skipped, overlap="skip") is not run either, and said so.
    said += [int(m.group(1) or m.group(2)) for m in worker.matches(UNRUN_LINE)]
    assert len(said) <= 3, worker.output  # a rare stall, not a broken ticker
    assert not set(said) & set(slots), (said, slots)
    inside = [s for s in said if slots[0] < s < slots[-1]]
    expected = list(range(slots[0], slots[-1] + 1))
    assert sorted(slots + inside) == expected, (slots, said, worker.output)
    assert slots == sorted(slots)
    for m in worker.matches(SLOT_LINE):  # each run saw its own slot
        assert m.group(2).startswith(time.strftime("%Y-%m-%d", time.gmtime(int(m.group(1)))))
        assert m.group(2).endswith("+00:00")
    assert "worker stopped" in worker.output


def test_no_scheduler_publishes_no_ticks(procs: Processes) -> None:
    worker = procs.m("worker", "--app", "examples.heartbeat", "--no-scheduler")
    worker.wait_for(r"worker starting: role=worker broker=memory://default")
    time.sleep(2.5)  # two slot boundaries pass; a ticker would have fired
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert worker.matches(r"every_second slot=") == []
    assert worker.matches(r"framework_m.ticker") == []
    assert "0 succeeded" in worker.output


SLOW_APP = """
import asyncio
from framework_m_core import App

app = App()

@app.job(every=1)
async def slow(ctx):
    print(f"start {ctx.job_id}", flush=True)
    await asyncio.sleep(float(__import__("os").environ.get("SLOW_SECONDS", "1.5")))
    print(f"end {ctx.job_id}", flush=True)
"""


def test_sigterm_lets_the_running_job_finish(procs: Processes, tmp_path: Path) -> None:
    (tmp_path / "slowapp.py").write_text(SLOW_APP)
    worker = procs.m("worker", "--app", "slowapp", "--concurrency", "1", env=on_path(tmp_path))
    [started] = worker.wait_for(r"^start (\w+)")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert f"end {started.group(1)}" in worker.output
    assert worker.matches(r"worker stopped: [1-9]\d* succeeded")


def test_second_signal_releases_running_jobs_at_once(procs: Processes, tmp_path: Path) -> None:
    (tmp_path / "slowapp.py").write_text(SLOW_APP)
    worker = procs.m(
        "worker",
        "--app",
        "slowapp",
        "--shutdown-timeout",
        "60",
        env={**on_path(tmp_path), "SLOW_SECONDS": "60"},
    )
    worker.wait_for(r"^start ")
    worker.signal(signal.SIGINT)
    worker.wait_for(r"waiting up to 60s for \d+ running job")
    t0 = time.monotonic()
    worker.signal(signal.SIGINT)
    assert worker.wait(timeout=10) == 0
    assert time.monotonic() - t0 < 5
    assert worker.matches(r"aborting: releasing \d+ running job\(s\)")
    assert worker.matches(r"\d+ released")


BLOCKING_APP = """
import time
from framework_m_core import App

app = App()

@app.job(every=1, max_attempts=1)
def blocking(ctx):
    print(f"start {ctx.job_id}", flush=True)
    time.sleep(60)
"""


def test_a_signal_leaves_at_once_while_plain_def_handlers_still_run(
    procs: Processes, tmp_path: Path
) -> None:
    (tmp_path / "blockingapp.py").write_text(BLOCKING_APP)
    worker = procs.m(
        "worker", "--app", "blockingapp", "--shutdown-timeout", "0.5", env=on_path(tmp_path)
    )  # fmt: skip
    worker.wait_for(r"^start ")
    worker.signal(signal.SIGINT)  # graceful: the deadline passes, the job is released
    worker.wait_for(r"waiting for plain 'def' handlers still running in \d+ thread\(s\)")
    assert worker.matches(r"worker stopped: .* [1-9]\d* released")
    t0 = time.monotonic()
    worker.signal(signal.SIGINT)
    assert worker.wait(timeout=10) == 128 + signal.SIGINT
    assert time.monotonic() - t0 < 5
    assert worker.matches(r"received SIGINT: leaving now")
    assert "Traceback" not in worker.output


STALLING_APP = """
import time
from framework_m_core import App

app = App()

@app.job(every=2, max_attempts=1)
async def stalls(ctx):
    time.sleep(1.5)  # blocks the event loop
"""


def test_a_handler_blocking_the_event_loop_is_named_by_the_worker(
    procs: Processes, tmp_path: Path
) -> None:
    (tmp_path / "stallingapp.py").write_text(STALLING_APP)
    worker = procs.m(
        "worker", "--app", "stallingapp", "--stall-warning", "0.5", env=on_path(tmp_path)
    )  # fmt: skip
    [warned] = worker.wait_for(r"the event loop has been blocked for .*", timeout=20)
    assert re.search(r"jobs running: stalls\[[0-9a-f]{32}\]", warned.group(0)), warned.group(0)
    assert "stallingapp.py:9 in stalls (time.sleep(1.5)" in warned.group(0)
    assert "`await asyncio.to_thread(...)`" in warned.group(0)
    worker.wait_for(r"the event loop runs again, after \d\.\ds blocked")
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=15) == 0


def on_path(directory: Path) -> dict[str, str]:
    """Environment that lets a worker import an app module written to ``directory``."""
    return {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(directory), os.environ.get("PYTHONPATH")]))
    }


CRASHING_APP = """
import time
from framework_m_core import App, Every

BREAKS_AT = time.monotonic() + 2.5

class Crashing(Every):
    def next_after(self, t):
        if time.monotonic() > BREAKS_AT:
            raise RuntimeError("injected: the schedule broke")
        return super().next_after(t)

app = App()

@app.job(schedule=Crashing(1))
async def tick(ctx):
    print(f"tick {int(ctx.scheduled_at.timestamp())}", flush=True)
"""


def test_a_worker_whose_ticker_dies_exits_non_zero_at_once_saying_why(
    procs: Processes, tmp_path: Path
) -> None:
    (tmp_path / "crashing.py").write_text(CRASHING_APP)
    worker = procs.m("worker", "--app", "crashing", env=on_path(tmp_path))
    worker.wait_for(r"^tick \d+", timeout=20)  # it ran before it broke
    worker.wait_for(r"the ticker died; stopping the worker", timeout=20)
    died = time.monotonic()
    assert worker.wait(timeout=10) != 0
    assert time.monotonic() - died < 1.0
    assert "RuntimeError: injected: the schedule broke" in worker.output
    assert "Traceback" in worker.output
    assert worker.matches(r"m: error: the ticker died: RuntimeError: injected")


def test_no_sync_schema_refuses_until_m_sync_schema_ran(procs: Processes) -> None:
    ns = namespace("redis://127.0.0.1:6379/0")
    url = ns.url()
    try:
        refused = procs.m(
            "worker", "--app", "examples.heartbeat", "--broker", url, "--no-sync-schema"
        )
        assert refused.wait() == 1
        assert "m: schema conflict: the broker's schema is not what this code needs" in (
            refused.output
        )
        assert procs.m("sync-schema", "--broker", url).wait() == 0
        worker = procs.m(
            "worker", "--app", "examples.heartbeat", "--broker", url, "--no-sync-schema",
            env={"M_LOG_LEVEL": "info"},
        )  # fmt: skip
        worker.wait_for(r"every_second slot=", timeout=20)
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
        assert "schema synced" not in worker.output
    finally:
        asyncio.run(ns.drop())


def test_m_dead_letters_list_shows_the_latest_with_their_reasons(procs: Processes) -> None:
    ns = namespace("redis://127.0.0.1:6379/0")
    url = ns.url()
    try:
        for job in ("nobody", "nobody", "ghost"):
            assert procs.m("enqueue", job, "--broker", url).wait() == 0
        worker = procs.m("worker", "--app", "examples.heartbeat", "--broker", url, "--no-scheduler")
        worker.wait_for("dead-lettered", count=3, timeout=20)
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
        listing = procs.m(
            "dead-letters", "list", "--broker", url, "--job", "nobody", "--limit", "1"
        )
        assert listing.wait() == 0
        assert "1 dead letter(s) of job nobody" in listing.output
        assert "unknown job 'nobody': not registered in this app" in listing.output
        everything = procs.m("dead-letters", "list", "--broker", url)
        assert everything.wait() == 0
        assert "3 dead letter(s)" in everything.output
        assert "ghost" in everything.output
    finally:
        asyncio.run(ns.drop())


HELD_APP = """
import asyncio
from framework_m_core import App

app = App()

@app.job
async def held(ctx, n):
    print(f"start {ctx.job_id}", flush=True)
    await asyncio.sleep(60)
"""


def test_a_stop_names_the_jobs_it_released(procs: Processes, tmp_path: Path) -> None:
    (tmp_path / "heldapp.py").write_text(HELD_APP)
    ns = namespace("redis://127.0.0.1:6379/0")
    url = ns.url()

    async def enqueue() -> list[str]:
        async with open_broker(url) as broker:
            await broker.sync_schema()
            return [await broker.enqueue("held", n=n) for n in range(7)]

    try:
        ids = asyncio.run(enqueue())
        worker = procs.m(
            "worker", "--app", "heldapp", "--broker", url, "--no-scheduler",
            "--concurrency", "7", "--shutdown-timeout", "0.2", env=on_path(tmp_path),
        )  # fmt: skip
        worker.wait_for(r"^start ", count=7)
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
        [stopped] = worker.matches(r"worker stopped: .* 7 released \((.*) and 2 more\), ")
        named = stopped.group(1).split(", ")
        assert len(set(named)) == 5, stopped.group(0)
        assert set(named) <= {f"held[{job_id}]" for job_id in ids}, stopped.group(0)
    finally:
        asyncio.run(ns.drop())

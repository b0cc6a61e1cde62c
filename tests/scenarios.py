"""Multi-process scenarios that every shared broker must pass."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from .brokers import assert_each_slot_once, read_slots, wait_for_slot
from .conftest import M, MProcess, start_replicas, stop_replicas


def wait_for_line(path: Path, prefix: str, timeout: float, nth: int = 1) -> list[str]:
    """The ``nth`` line of ``path`` starting with ``prefix``, split into words."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [ln.split() for ln in path.read_text().splitlines()] if path.exists() else []
        found = [ln for ln in lines if ln[0] == prefix]
        if len(found) >= nth:
            return found[nth - 1]
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{len(found)} of {nth} {prefix!r} lines in {path} after {timeout:g}s"
            )
        time.sleep(0.1)


def killed_job_scenario(run_m: Callable[..., MProcess], tmp_path: Path, url: str) -> list[MProcess]:
    """5 replicas tick a 1-second schedule for over 20 s; the one running a slow job and
    one other are SIGKILLed. Every slot runs once, and the killed job is run again to the
    end by another worker as attempt 2. Returns the surviving workers (stopped)."""
    slots, slow = tmp_path / "slots.log", tmp_path / "slow.log"
    env = {"FM_SLOT_LOG": str(slots), "FM_SLOW_LOG": str(slow)}
    workers = start_replicas(run_m, url, env, 5)
    first = int(time.time()) + 1
    enqueue = subprocess.run(
        [M, "enqueue", "slow", "--kwargs", '{"seconds": 4}', "--broker", url],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert enqueue.returncode == 0, enqueue.stderr
    job_id = enqueue.stdout.strip()
    _, started_id, pid, attempt = wait_for_line(slow, "start", timeout=10)
    assert (started_id, attempt) == (job_id, "1")
    running = next(w for w in workers if w.proc.pid == int(pid))
    running.signal(signal.SIGKILL)  # mid-job
    _, again_id, again_pid, again_attempt = wait_for_line(slow, "start", timeout=15, nth=2)
    assert (again_id, again_attempt) == (job_id, "2")
    # The second kill spares the worker running attempt 2, whose own redelivery is not the point.
    other = next(w for w in workers if w.proc.pid not in (int(pid), int(again_pid)))
    wait_for_slot(slots, first + 6, timeout=20)
    other.signal(signal.SIGKILL)
    survivors = [w for w in workers if w not in (running, other)]
    _, done_id, done_pid, done_attempt = wait_for_line(slow, "end", timeout=20)
    assert done_id == job_id
    assert (int(done_pid), done_attempt) == (int(again_pid), "2")
    wait_for_slot(slots, first + 23, timeout=25)
    last = int(time.time()) - 2
    stop_replicas(survivors)
    assert_each_slot_once(read_slots(slots), first, last)
    assert last - first >= 20
    return survivors

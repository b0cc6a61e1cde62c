"""The multi-process scenario the outage tests share, whichever broker they disrupt."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from framework_m_core.testing.scenarios import (
    Processes,
    assert_each_slot_once,
    slot_runs,
    stop_all,
    wait_for_slot,
)


def replicas_ride_out(
    procs: Processes, url: str, tmp_path: Path, disrupt: Callable[[], None], replicas: int = 3
) -> None:
    """``replicas`` workers tick a 1-second schedule; ``disrupt`` runs a few slots in.
    No slot runs twice; every slot before the disruption and after the broker is back
    runs; of the slots it made late, only the latest is owed (the grace rule), so they
    may be missing from its start until a few seconds after it ended."""
    log = tmp_path / "slots.log"
    workers = procs.workers(url, replicas, env={"FM_SLOT_LOG": str(log)})
    first = int(time.time()) + 1
    wait_for_slot(log, first + 4, timeout=20)
    disrupted = time.time()
    disrupt()
    back = time.time()
    wait_for_slot(log, int(back) + 8, timeout=60)
    last = int(time.time()) - 2
    stop_all(workers)
    # Back: publishes waiting to retry wake within 2 s, then new slots go through.
    assert_each_slot_once(slot_runs(log), first, last, outage=(disrupted - 1, back + 4))

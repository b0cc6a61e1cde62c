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
    Every slot from the first to the last runs exactly once, the disruption's included
    (an outage shorter than grace delays slots, it loses none)."""
    log = tmp_path / "slots.log"
    workers = procs.workers(url, replicas, env={"FM_SLOT_LOG": str(log)})
    first = int(time.time()) + 1
    wait_for_slot(log, first + 4, timeout=20)
    disrupt()
    wait_for_slot(log, int(time.time()) + 6, timeout=60)
    last = int(time.time()) - 2
    stop_all(workers)
    assert_each_slot_once(slot_runs(log), first, last)

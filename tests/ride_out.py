"""The multi-process scenario the outage tests share, whichever broker they disrupt."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from framework_m_core.runtime.worker import FETCH_BACKOFF_MAX
from framework_m_core.testing.scenarios import (
    Processes,
    assert_each_slot_once,
    slot_runs,
    stop_all,
    wait_for_slot,
    wait_ticking,
)

# Settings under which the scenario checks the grace rule: a tick is stored no later
# than slot + grace + clock skew.
GRACE, SKEW = 2.0, 0.5
Windows = Sequence[tuple[float, float]]


def replicas_ride_out(
    procs: Processes,
    url: str,
    tmp_path: Path,
    disrupt: Callable[[], Windows | object],
    replicas: int = 3,
) -> None:
    """``replicas`` workers tick a 1-second schedule; ``disrupt`` runs a few slots in.
    No slot runs twice; every slot before the disruption and after the broker is back
    runs; of the slots it made late, only the latest is owed (the grace rule), so they
    may be missing from its start until a few seconds after it ended.

    When ``disrupt`` returns the windows (start, end) in which the broker could store
    nothing, no slot that began inside one and whose grace ended inside it ran: it was
    never stored, or stored late and refused (by the broker or the worker).
    """
    log = tmp_path / "slots.log"
    workers = procs.workers(
        url, replicas, "--grace", str(GRACE), "--clock-skew", str(SKEW),
        env={"FM_SLOT_LOG": str(log)},
    )  # fmt: skip
    wait_ticking(workers)
    first = int(time.time()) + 1
    wait_for_slot(log, first + 3, timeout=20)
    disrupted = time.time()
    windows = disrupt()
    back = time.time()
    wait_for_slot(log, int(back) + 6, timeout=60)
    last = int(time.time()) - 2
    stop_all(workers)
    runs = slot_runs(log)
    # A delivery run just before the broker stopped answering for longer than the
    # visibility timeout may run again after it (at-least-once): its ack waited out the
    # stop and another worker's reclaim could reach the broker first. Slots run then
    # reach back as far as a worker's receive backoff and the grace of late ticks.
    frozen = [down for down, _ in windows] if isinstance(windows, Sequence) else [disrupted]
    reach = GRACE + SKEW + FETCH_BACKOFF_MAX + 1
    redelivery = [(down - reach, down + 1) for down in frozen]
    # Back: publishes waiting to retry wake within 2 s, then new slots go through.
    assert_each_slot_once(
        runs,
        first,
        last,
        redelivery=redelivery,
        outage=(disrupted - 1, back + 4),
        workers=workers,
        context=f"disrupted {disrupted:.3f}, back {back:.3f}",
    )
    if isinstance(windows, Sequence):
        ran = {slot for slot, _, _ in runs}
        for down, up in windows:
            late = [s for s in ran if down + 0.2 < s and s + GRACE + SKEW + 0.5 < up]
            assert not late, f"slots stored after their grace ran: {late} ({down:.1f}-{up:.1f})"

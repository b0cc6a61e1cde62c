"""Quorum lost on a 3-node RabbitMQ cluster: two nodes SIGSTOPped under three ticking
replicas, one on each node. While quorum is gone no publish is confirmed; when it
returns the queue stores what it was holding at once. No slot may run past its
deadline, none be enqueued twice, and none that ran have been reported failed."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from framework_m_core.runtime.execution import DELIVERY_SKEW
from framework_m_core.testing.proxy import free_port
from framework_m_core.testing.scenarios import (
    RECORDER_APP,
    Process,
    Processes,
    assert_each_slot_once,
    slot_runs,
    slot_starts,
    stop_all,
    wait_for_slot,
    wait_ticking,
)
from framework_m_rabbitmq.testing import RabbitNamespace

from .brokers import RabbitServer, rabbit_cluster
from .test_probes import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]  # three nodes to start

GRACE, SKEW = 2.0, 1.0
OUTAGE = 20.0
# From a delivery's arrival to its handler's first line, on a loaded machine.
RUN_SLACK = 3.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[RabbitServer]]:
    with rabbit_cluster(tmp_path) as nodes:
        yield nodes


def reported(worker: Process, outcome: str) -> set[int]:
    """The slots of ``record`` that ``worker`` logged as failed or of unknown outcome."""
    pattern = {
        "failed": r"slot tick:record:(\d+) not enqueued",
        "unknown": r"slot tick:record:(\d+): outcome unknown",
    }[outcome]
    return {int(m.group(1)) for m in re.finditer(pattern, worker.output)}


def test_quorum_lost_and_back_runs_no_slot_late_twice_or_reported_failed(
    cluster: list[RabbitServer], procs: Processes, tmp_path: Path
) -> None:
    log = tmp_path / "slots.log"
    tag = uuid.uuid4().hex[:12]
    ports = [free_port() for _ in cluster]
    args = ("--app", RECORDER_APP, "--grace", f"{GRACE:g}", "--clock-skew", f"{SKEW:g}")
    env = {"FM_SLOT_LOG": str(log)}
    workers = []
    for node, port in zip(cluster, ports, strict=True):
        url = RabbitNamespace(node.url, tag).url()
        workers.append(
            procs.m("worker", *args, "--broker", url, "--http", f"127.0.0.1:{port}", env=env)
        )
    wait_ticking(workers, timeout=60)
    first = int(time.time()) + 2
    wait_for_slot(log, first + 2, timeout=60)

    # The replica on the node left running sees its publishes go unanswered.
    lost_at = min([node.freeze() for node in cluster[:2]])
    wait_for(ports[2], "/readyz", 503, timeout=OUTAGE)
    time.sleep(max(0.0, lost_at + OUTAGE - time.time()))  # the outage's length, not a wait
    back_at = max([node.thaw() for node in cluster[:2]])

    for port in ports:
        wait_for(port, "/readyz", 200, timeout=60)
    last = int(time.time()) + 3
    wait_for_slot(log, last, timeout=60)
    stop_all(workers)

    runs = slot_runs(log)
    # ``record`` allows overlap: a delivery the queue's leader handed to a second worker
    # when quorum returned (it took the first one's node for lost) runs twice there,
    # as a redelivery (a higher attempt), never as a second enqueue.
    assert_each_slot_once(
        runs,
        first,
        last,
        redelivery=[(lost_at - GRACE - SKEW, back_at + GRACE + SKEW)],
        outage=(lost_at - GRACE - SKEW, back_at + 10),
        workers=workers,
        context=f"quorum lost {lost_at:.3f}, back {back_at:.3f}",
    )
    deadline = GRACE + SKEW + DELIVERY_SKEW + RUN_SLACK
    late = [(slot, round(start - slot, 1)) for slot, start in slot_starts(log)]
    assert [(slot, s) for slot, s in late if s > deadline] == [], late
    ran = {slot for slot, _, _ in runs}
    failed = set().union(*(reported(w, "failed") for w in workers))
    assert failed & ran == set(), f"reported failed but ran: {sorted(failed & ran)}"
    # The scenario took place: publishes went unanswered, and ticks stored while quorum
    # was gone reached the workers after their deadline.
    assert set().union(*(reported(w, "unknown") for w in workers))
    assert any("expired: " in w.output for w in workers)
    for w in workers:
        assert "Traceback" not in w.output, w.output[-3000:]
        assert "Unhandled message" not in w.output  # a late return, with its body

"""examples/django_project with three ``m worker`` replicas on Redis, found from
DJANGO_SETTINGS_MODULE with no ``--app``: a view's task runs once and its result is read
back, and the periodic task runs once per slot."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

from django.core.management import call_command
from django.test import Client

from framework_m_core import connect_sync
from framework_m_core.testing.scenarios import processes, stop_all

from .conftest import EXAMPLE


def _lines(log: Path, kind: str) -> list[list[str]]:
    found = log.read_text().splitlines() if log.exists() else []
    return [line.split()[1:] for line in found if line.startswith(kind + " ")]


def test_three_replicas_run_a_view_s_task_once_and_the_periodic_one_once_per_slot(
    broker_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "shop.log"
    env = {"DJANGO_SETTINGS_MODULE": "mysite.settings", "M_BROKER_URL": broker_url}
    env["SHOP_LOG"] = str(log)
    # the project first; then what this process imports from (a mutation run's copy)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(EXAMPLE), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    )
    call_command("check")  # the backend's checks pass (SystemCheckError otherwise)
    with processes(EXAMPLE) as procs:
        workers = [procs.m("worker", "--broker", broker_url, env=env) for _ in range(3)]
        for w in workers:
            w.wait_for("worker starting: role=", timeout=60)
        web = Client()
        placed = web.post(
            "/orders", {"order_id": "o-1", "prices": [2, 3, 5]}, content_type="application/json"
        )
        assert placed.status_code == 202, placed.content
        result_id = placed.json()["result_id"]
        deadline = time.monotonic() + 30
        while (answer := web.get(f"/tasks/{result_id}").json())["status"] != "SUCCESSFUL":
            assert answer["status"] in ("READY", "RUNNING"), answer
            assert time.monotonic() < deadline, answer
            time.sleep(0.1)
        assert answer == {"status": "SUCCESSFUL", "attempts": 1, "value": 10}
        deadline = time.monotonic() + 30
        while len(_lines(log, "heartbeat")) < 4:
            assert time.monotonic() < deadline, [w.output[-2000:] for w in workers]
            time.sleep(0.2)
        stop_all(workers)
    assert [line[0] for line in _lines(log, "total")] == ["o-1"]  # ran once
    beats = [line[0] for line in _lines(log, "heartbeat")]
    with connect_sync(broker_url) as client:
        slots = Counter(client.status(job_id).slot for job_id in beats)
    assert None not in slots
    assert [s for s, n in slots.items() if n > 1] == [], slots  # once per slot

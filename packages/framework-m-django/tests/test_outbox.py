"""Django's tasks through the outbox: enqueued in ``transaction.atomic()`` blocks of the
example project on PostgreSQL, a third rolled back, relayed by two real ``m worker``
replicas: each committed task runs once, no rolled-back one runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import sqlalchemy as sa

from framework_m_core import connect_sync
from framework_m_core.testing.scenarios import processes, stop_all
from framework_m_outbox.testing import scratch_database

from .conftest import EXAMPLE

WRITER = """
import json, django
django.setup()
from django.core.management import call_command
from django.db import transaction
from shop.tasks import total

call_command("check")
committed, rolled_back = [], []
for n in range(30):
    try:
        with transaction.atomic():
            result = total.enqueue(f"o-{n}", [n, 1])
            if n % 3 == 0:
                raise RuntimeError("rolled back")
        committed.append([f"o-{n}", result.id])
    except RuntimeError:
        rolled_back.append(f"o-{n}")
print(json.dumps({"committed": committed, "rolled_back": rolled_back}))
"""


def test_tasks_enqueued_in_atomic_blocks_run_once_when_committed_and_never_when_not(
    broker_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "shop.log"
    with scratch_database("postgresql") as db, processes(EXAMPLE) as procs:
        url = sa.make_url(db).set(drivername="postgresql").render_as_string(hide_password=False)
        env = {
            "DJANGO_SETTINGS_MODULE": "mysite.settings",
            "M_BROKER_URL": broker_url,
            "SHOP_LOG": str(log),
            "SHOP_DATABASE_URL": url,
            "PYTHONPATH": os.pathsep.join(
                [str(EXAMPLE), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
            ),
        }
        synced = procs.m("sync-schema", "--broker", broker_url, "--outbox-url", url, env=env)
        assert synced.wait(60) == 0, synced.output
        wrote = subprocess.run(
            [sys.executable, "-c", WRITER],
            env={**os.environ, **env},
            cwd=EXAMPLE,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert wrote.returncode == 0, wrote.stderr
        told = json.loads(wrote.stdout.splitlines()[-1])
        committed = dict(told["committed"])
        assert len(committed) == 20
        assert len(told["rolled_back"]) == 10
        workers = [
            procs.m("worker", "--broker", broker_url, "--outbox-url", url, env=env)
            for _ in range(2)
        ]
        for w in workers:  # a SIGTERM before its handlers are set would kill it
            w.wait_for("worker starting: .* outbox=relayed", timeout=60)
        deadline = time.monotonic() + 60
        while not set(committed) <= set(_orders(log)):
            assert time.monotonic() < deadline, [w.output[-2000:] for w in workers]
            time.sleep(0.2)
        stop_all(workers)
    ran = _orders(log)
    assert sorted(ran) == sorted(committed)  # each committed order once, no rolled-back one
    with connect_sync(broker_url) as client:  # the result id enqueue gave leads to the job
        assert {str(client.status(i).state) for i in committed.values()} == {"succeeded"}


def _orders(log: Path) -> list[str]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.split()[1] for line in lines if line.startswith("total ")]

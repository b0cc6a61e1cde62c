"""The outbox under fire: 1,000 transactions on PostgreSQL and MariaDB, a third rolled
back, while three ticking ``m worker --outbox-url`` replicas relay them to NATS, Redis
or RabbitMQ and are SIGKILLed at random: every committed job runs once, no rolled-back
job runs."""

from __future__ import annotations

import random
import re
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from framework_m_core.testing.scenarios import Process, Processes, stop_all, what_workers_said
from framework_m_outbox import Outbox
from framework_m_outbox.table import outbox
from framework_m_outbox.testing import scratch_database

from .brokers import synced_namespace

pytestmark = pytest.mark.processes

SERVERS = {
    "nats": "nats://127.0.0.1:4222",
    "redis": "redis://127.0.0.1:6379/0",
    "rabbitmq": "amqp://guest:guest@127.0.0.1:5672/",
}
TRANSACTIONS = 1000

orders = sa.Table(
    "orders",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("job_id", sa.String(32), nullable=False),
)


def _runs(status: Path) -> list[tuple[str, int, int]]:
    """``(job id, pid, attempt)`` of each run of ``marked``, by the recorder's log."""
    lines = status.read_text().splitlines() if status.exists() else []
    out = []
    for line in lines:
        word = line.split()
        if word[0] == "marked":
            out.append((word[1], int(word[2]), int(word[3])))
    return out


def _write(db: str, committed: list[str], rolled_back: list[str], done: threading.Event) -> None:
    """One job per transaction with an order row; every third transaction rolled back."""
    engine = sa.create_engine(db, pool_size=2)
    try:
        for n in range(TRANSACTIONS):
            with Session(engine) as session:
                session.begin()
                job_id = Outbox(session).enqueue_sync("marked")
                session.execute(sa.insert(orders).values(id=n, job_id=job_id))
                if n % 3 == 0:
                    session.rollback()
                    rolled_back.append(job_id)
                else:
                    session.commit()
                    committed.append(job_id)
    finally:
        engine.dispose()
        done.set()


def _table_rows(db: str) -> int:
    engine = sa.create_engine(db, poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(outbox)).scalar_one())
    finally:
        engine.dispose()


@pytest.mark.timeout(300)  # a killed relay's claim lapses after 30 s; a loaded machine
@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("kind", ["postgresql", "mariadb"])
def test_committed_jobs_run_once_and_rolled_back_ones_never_while_relays_are_killed(
    procs: Processes, kind: str, server: str, tmp_path: Path
) -> None:
    status = tmp_path / "status.log"
    env = {"FM_STATUS_LOG": str(status)}
    pick = random.Random(f"{kind}-{server}")
    with synced_namespace(SERVERS[server]) as url, scratch_database(kind) as db:
        engine = sa.create_engine(db, poolclass=sa.NullPool)
        orders.metadata.create_all(engine)
        engine.dispose()
        workers = procs.workers(url, 3, "--outbox-url", db, env=env)
        for w in workers:
            w.wait_for("outbox relay on", timeout=30)
        committed: list[str] = []
        rolled_back: list[str] = []
        done = threading.Event()
        writer = threading.Thread(target=_write, args=(db, committed, rolled_back, done))
        writer.start()
        killed: list[Process] = []
        while not done.wait(pick.uniform(0.3, 0.9)):
            victim = workers.pop(pick.randrange(len(workers)))
            victim.signal(signal.SIGKILL)
            victim.wait(10)
            killed.append(victim)
            workers.append(procs.m("worker", "--app", "framework_m_core.testing.recorder",
                                   "--broker", url, "--outbox-url", db, env=env))  # fmt: skip
            workers[-1].wait_for("outbox relay on", timeout=30)
        writer.join(60)
        assert len(committed) + len(rolled_back) == TRANSACTIONS
        assert killed, "the writer finished before any relay was killed"
        # Rows claimed by a killed relay wait for its claim to lapse (30 s).
        deadline = time.monotonic() + 150
        while _table_rows(db) or not set(committed) <= {i for i, _, _ in _runs(status)}:
            assert time.monotonic() < deadline, (
                f"{_table_rows(db)} row(s) left, "
                f"{len(set(committed) - {i for i, _, _ in _runs(status)})} job(s) never ran; "
                f"the workers said:\n{what_workers_said([*killed, *workers])}"
            )
            time.sleep(0.5)
        stop_all(workers)
    runs = _runs(status)
    ran = {job_id for job_id, _, _ in runs}
    assert ran.isdisjoint(rolled_back)
    assert ran == set(committed)  # nothing else ran (the ticks are of other jobs)
    enqueued_twice = [k for k, n in Counter((i, a) for i, _, a in runs).items() if n > 1]
    assert enqueued_twice == []
    # A job run again is a redelivery: the worker of its earlier run was killed after
    # running it and before the ack.
    killed_pids = {p.pid for p in killed}
    by_job: dict[str, list[tuple[int, int]]] = {}
    for job_id, pid, attempt in runs:
        by_job.setdefault(job_id, []).append((attempt, pid))
    unexplained = [
        job_id
        for job_id, its in by_job.items()
        if any(pid not in killed_pids for _, pid in sorted(its)[:-1])
    ]
    assert unexplained == []


def test_an_operator_sees_the_outbox_in_metrics_status_and_the_log(
    procs: Processes, tmp_path: Path
) -> None:
    from framework_m_core.testing.proxy import free_port

    from .test_metrics import scrape

    port = free_port()
    with synced_namespace(SERVERS["redis"]) as url, scratch_database("postgresql") as db:
        created = procs.m("sync-schema", "--broker", url, "--outbox-url", db)
        assert created.wait(60) == 0, created.output
        assert "outbox: created table framework_m_outbox" in created.output
        again = procs.m("sync-schema", "--outbox-url", db)  # the table alone
        assert again.wait(60) == 0, again.output
        assert "outbox: the table is in sync" in again.output
        engine = sa.create_engine(db, poolclass=sa.NullPool)
        with Session(engine) as session, session.begin():  # a job no broker will take
            job_id = Outbox(session).enqueue_sync("marked")
            session.execute(sa.update(outbox).values(body='{"v": 1}'))
        engine.dispose()
        password_db = db.replace("postgres@", "postgres:s3cret@")  # trust auth: any password
        worker = procs.m(
            "worker", "--app", "framework_m_core.testing.recorder", "--broker", url,
            "--outbox-url", password_db, "--http", f"127.0.0.1:{port}",
        )  # fmt: skip
        worker.wait_for("outbox relay on postgresql\\+psycopg://postgres:\\*\\*\\*@", timeout=30)
        worker.wait_for(f"publish of job {job_id} .* failed, attempt 1", timeout=30)
        deadline = time.monotonic() + 30
        while scrape(port).get(("frameworkm_outbox_failing_rows", "")) != 1.0:
            assert time.monotonic() < deadline, "the failing row never showed in /metrics"
            time.sleep(0.2)
        sample = scrape(port)
        assert sample[("frameworkm_outbox_rows", "")] == 1.0
        assert sample[("frameworkm_outbox_oldest_age_seconds", "")] > 0
        assert sample[("frameworkm_outbox_publish_failures_total", "")] >= 1
        deadline = time.monotonic() + 40  # the roll is renewed every 10 s
        while True:
            shown = procs.m("status", "--broker", url)
            assert shown.wait(30) == 0, shown.output
            if "1 failing" in shown.output:
                break
            assert time.monotonic() < deadline, shown.output
            time.sleep(1)
        assert re.search(r"outbox +1 row\(s\) waiting, oldest [0-9.]+s, 1 failing", shown.output)
        assert "s3cret" not in worker.output + shown.output
        stop_all([worker])


def test_the_relay_is_on_with_an_outbox_url_unless_no_outbox_and_refuses_what_cannot_hold(
    procs: Processes, tmp_path: Path
) -> None:
    with synced_namespace(SERVERS["redis"]) as url:
        worker = procs.m(
            "worker", "--app", "framework_m_core.testing.recorder", "--broker", url,
            "--no-scheduler", "--clock-skew", "117", "--outbox-url", "sqlite:///unused.db",
        )  # fmt: skip
        assert worker.wait(60) == 2, worker.output
        assert "claim of 1.5s plus the tolerated clock skew of 117s" in worker.output
        off = procs.m(
            "worker", "--app", "framework_m_core.testing.recorder", "--broker", url,
            "--no-outbox", env={"M_OUTBOX_URL": "sqlite:///unused.db"},
        )  # fmt: skip
        off.wait_for("worker starting: .* outbox=off", timeout=30)
        on = procs.m(
            "worker", "--app", "framework_m_core.testing.recorder", "--broker", url,
            env={"M_OUTBOX_URL": f"sqlite:///{tmp_path / 'app.db'}"},
        )  # fmt: skip
        on.wait_for("worker starting: .* outbox=relayed", timeout=30)
        on.wait_for("outbox schema: created table framework_m_outbox", timeout=30)
        stop_all([off, on])
        bad = procs.m(
            "worker", "--app", "framework_m_core.testing.recorder", "--broker", url,
            "--outbox-url", "oracle://db/app",
        )  # fmt: skip
        assert bad.wait(60) == 2, bad.output
        assert "not 'oracle'" in bad.output

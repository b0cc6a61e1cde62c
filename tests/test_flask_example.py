"""examples/flask_app.py: plain ``def`` views enqueue through the blocking client; a real
``m worker`` runs the jobs, and a view reads their statuses."""

from __future__ import annotations

import importlib
import time

import pytest

from framework_m_core.testing.scenarios import Processes, stop_all

from .brokers import synced_namespace
from .conftest import REPO

pytestmark = pytest.mark.processes

SERVER = "redis://127.0.0.1:6379/0"


def test_signups_enqueue_once_per_address_and_a_worker_sends_them(
    monkeypatch: pytest.MonkeyPatch, procs: Processes
) -> None:
    monkeypatch.syspath_prepend(str(REPO))
    flask_app = importlib.import_module("examples.flask_app")
    with synced_namespace(SERVER) as url:
        monkeypatch.setenv("M_BROKER_URL", url)
        web = flask_app.create_app().test_client()
        first = web.post("/signups", json={"email": "ada@example.com"})
        again = web.post("/signups", json={"email": "ada@example.com"})
        other = web.post("/signups", json={"email": "bob@example.com"})
        assert web.post("/signups", json={}).status_code == 422
        assert first.status_code == again.status_code == other.status_code == 202
        ada, bob = first.json["job_id"], other.json["job_id"]
        assert again.json["job_id"] == ada != bob
        assert web.get(f"/jobs/{ada}").json["state"] == "queued"
        assert web.get("/jobs/not%20an%20id").status_code == 400
        worker = procs.m("worker", "--app", "examples.flask_app", "--broker", url)
        for job_id, to in ((ada, "ada@example.com"), (bob, "bob@example.com")):
            deadline = time.monotonic() + 30
            while (found := web.get(f"/jobs/{job_id}").json)["state"] != "succeeded":
                assert time.monotonic() < deadline, found
                time.sleep(0.1)
            assert found["result"] == f"welcome email sent to {to}"
        stop_all([worker])
        assert worker.output.count("welcome email to ") == 2, worker.output


def test_without_a_shared_broker_the_app_refuses_to_start_saying_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(REPO))
    flask_app = importlib.import_module("examples.flask_app")
    monkeypatch.setenv("M_BROKER_URL", "memory://")
    with pytest.raises(RuntimeError, match="memory:// lives in this process only"):
        flask_app.create_app()

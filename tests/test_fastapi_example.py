"""examples/fastapi_app.py: requests enqueue through the app's broker; a worker runs them."""

from __future__ import annotations

import asyncio
import importlib

import pytest
from fastapi.testclient import TestClient

from framework_m_core import connect
from framework_m_core.testing import running_worker, wait_until

from .brokers import synced_namespace
from .conftest import REPO

SERVER = "redis://127.0.0.1:6379/0"


def test_signups_enqueue_once_per_address_and_a_worker_sends_them(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.syspath_prepend(str(REPO))
    fastapi_app = importlib.import_module("examples.fastapi_app")

    async def run_jobs() -> int:
        async with connect(url) as broker, running_worker(fastapi_app.app, broker) as worker:
            await wait_until(lambda: worker.stats.succeeded == 2)
            left = await broker.queue_stats()  # no third job waits or runs
            assert (left.ready, left.reserved, left.scheduled) == (0, 0, 0)
            return worker.stats.succeeded

    with synced_namespace(SERVER) as url:
        monkeypatch.setenv("M_BROKER_URL", url)
        with TestClient(fastapi_app.api) as client:  # runs the lifespan: connect, close
            first = client.post("/signups", json={"email": "ada@example.com"})
            again = client.post("/signups", json={"email": "ada@example.com"})
            other = client.post("/signups", json={"email": "bob@example.com"})
            assert client.post("/signups", json={}).status_code == 422
        assert first.status_code == again.status_code == 202
        assert first.json()["job_id"] == again.json()["job_id"] != other.json()["job_id"]
        assert asyncio.run(run_jobs()) == 2
        sent = [r.getMessage() for r in caplog.records if r.getMessage().startswith("welcome")]
        assert sorted(sent) == [
            "welcome email to ada@example.com",
            "welcome email to bob@example.com",
        ]


@pytest.mark.parametrize("url", [None, "memory://"])
def test_without_a_shared_broker_the_app_refuses_to_start_saying_why(
    monkeypatch: pytest.MonkeyPatch, url: str | None
) -> None:
    monkeypatch.syspath_prepend(str(REPO))
    fastapi_app = importlib.import_module("examples.fastapi_app")
    if url is None:
        monkeypatch.delenv("M_BROKER_URL", raising=False)
    else:
        monkeypatch.setenv("M_BROKER_URL", url)
    with (
        pytest.raises(RuntimeError, match="set M_BROKER_URL to the shared broker"),
        TestClient(fastapi_app.api),
    ):
        pass

"""``m dead-letters requeue`` and ``purge`` on every real broker: a dead job comes back
and runs, with a fresh attempt count; purged letters are gone. ``m status`` counts them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from framework_m_core import App, JobContext
from framework_m_core.adapters.registry import open_broker
from framework_m_core.testing import namespace, running_worker, wait_until

from .conftest import REPO

pytestmark = pytest.mark.slow

SERVERS = [
    "nats://127.0.0.1:4222",
    "redis://127.0.0.1:6379/0",
    "amqp://guest:guest@127.0.0.1:5672/",
]


def m(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "framework_m_core", *args],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize("server", SERVERS, ids=["nats", "redis", "rabbitmq"])
def test_a_requeued_dead_job_runs_again_and_a_purged_one_is_gone(server: str) -> None:
    ns = namespace(server)
    url = ns.url()
    fixed, ran = False, []
    app = App()

    @app.job(max_attempts=1)
    async def flaky(ctx: JobContext, n: int) -> None:
        if not fixed:
            raise RuntimeError("not yet")
        ran.append((n, ctx.attempt))

    async def dead_letter_both() -> None:
        async with open_broker(url) as broker:
            await broker.sync_schema()
            await broker.enqueue("flaky", n=1)
            await broker.enqueue("other_job_nobody_runs")
            async with running_worker(app, broker) as worker:
                await wait_until(lambda: worker.stats.dead_lettered == 2)

    async def run_again() -> list[str]:
        async with open_broker(url) as broker, running_worker(app, broker):
            await wait_until(lambda: ran == [(1, 1)])  # a fresh attempt count
            return [d.reason for d in await broker.dead_letters()]

    try:
        asyncio.run(dead_letter_both())
        status = json.loads(m("status", "--broker", url, "--json").stdout)
        assert status["schema_in_sync"] is True
        assert (status["ready"], status["dead_letters"]) == (0, 2)
        assert status["scheduled"] in (0, None)
        refused = m("dead-letters", "requeue", "--broker", url, "--job", "flaky")
        assert refused.returncode == 2
        assert "add --yes" in refused.stderr
        done = m("dead-letters", "requeue", "--broker", url, "--job", "flaky", "--yes")
        assert done.returncode == 0, done.stderr
        assert "requeued 1 dead letter(s) of job flaky" in done.stdout
        assert "it was dead-lettered: failed after 1 attempt(s): RuntimeError: not yet" in (
            done.stderr
        )
        fixed = True
        left = asyncio.run(run_again())
        assert len(left) == 1
        assert "unknown job 'other_job_nobody_runs'" in left[0]
        purged = m("dead-letters", "purge", "--broker", url, "--yes")
        assert "purged 1 dead letter(s)" in purged.stdout
        assert "0 dead letter(s)" in m("dead-letters", "list", "--broker", url).stdout
    finally:
        asyncio.run(ns.drop())


def test_dead_letters_list_json_is_one_document_a_script_can_read() -> None:
    ns = namespace("redis://127.0.0.1:6379/0")
    url = ns.url()

    async def dead_letter_one() -> str:
        async with open_broker(url) as broker:
            await broker.sync_schema()
            job_id = await broker.enqueue("report", day="2026-01-02")
            [delivery] = await broker.receive(1, 5)
            await broker.dead_letter(delivery, "failed after 1 attempt(s): boom\nTraceback ...")
            return job_id

    try:
        job_id = asyncio.run(dead_letter_one())
        done = m("dead-letters", "list", "--broker", url, "--json")
        assert done.returncode == 0, done.stderr
        listing = json.loads(done.stdout)
        assert (listing["queue"], listing["job"], listing["count"]) == (url, None, 1)
        [letter] = listing["dead_letters"]
        assert (letter["job"], letter["job_id"], letter["attempts"]) == ("report", job_id, 1)
        assert letter["reason"] == "failed after 1 attempt(s): boom\nTraceback ..."
        assert letter["size"] > 0
        assert len(letter["key"]) == 20
        when = datetime.fromtimestamp(letter["dead_lettered_at"], UTC)
        assert letter["when"] == when.isoformat(timespec="seconds")  # as the text listing
        text = m("dead-letters", "list", "--broker", url, "--job", "other", "--json")
        assert json.loads(text.stdout) == {
            "queue": url,
            "job": "other",
            "count": 0,
            "dead_letters": [],
        }
    finally:
        asyncio.run(ns.drop())

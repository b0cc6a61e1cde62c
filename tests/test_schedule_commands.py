"""``m schedules pause|resume|trigger`` against a real shared broker."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from framework_m_core.adapters.registry import open_broker
from framework_m_core.ports import decode_message
from framework_m_core.scheduling import control
from framework_m_core.testing import namespace, receive_all

from .conftest import REPO

REDIS = "redis://127.0.0.1:6379/0"


def m(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "framework_m_core", *args],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_pause_resume_and_trigger_from_the_command_line() -> None:
    ns = namespace(REDIS)
    url = ns.url()
    app = ["--app", "examples.heartbeat", "--broker", url]

    async def state() -> control.ScheduleState:
        async with open_broker(url) as broker:
            return await control.read(broker, "heartbeat")

    async def queued() -> list[tuple[str | None, int | None]]:
        async with open_broker(url) as broker:
            messages = [decode_message(d.body) for d in await receive_all(broker)]
            return [(msg.deduplication_id, msg.scheduled_at) for msg in messages]

    try:
        done = m("sync-schema", "--broker", url)
        assert done.returncode == 0, done.stderr
        done = m("schedules", "pause", "heartbeat", "--reason", "deploy", *app)
        assert done.returncode == 0, done.stderr
        assert "heartbeat: paused;" in done.stdout
        paused = asyncio.run(state())
        assert (paused.paused, paused.reason) == (True, "deploy")

        done = m("schedules", "trigger", "heartbeat", *app)
        assert done.returncode == 0, done.stderr
        assert "triggered as job" in done.stdout
        [(dedup_id, slot)] = asyncio.run(queued())
        assert dedup_id is not None
        assert dedup_id.startswith("trigger:heartbeat:")
        assert slot is not None

        done = m("schedules", "resume", "heartbeat", "--broker", url)
        assert done.returncode == 0, done.stderr
        assert not asyncio.run(state()).paused

        for args, why in [
            (["pause", "nope", *app], "no scheduled job"),
            (["pause", "heartbeat", "--until", "tomorrow", *app], "not an ISO 8601 time"),
            (["pause", "heartbeat", "--until", "2020-01-01T00:00", *app], "offset"),
            (["pause", "heartbeat", "--until", "2020-01-01T00:00Z", *app], "future"),
            (["trigger", "heartbeat", "--kwargs", "[1]", *app], "JSON object"),
            (["pause", "heartbeat"], "shared broker"),
        ]:
            done = m("schedules", *args)
            assert done.returncode != 0, (args, done.stdout)
            assert why in done.stderr, (args, done.stderr)
        assert not asyncio.run(state()).paused  # refused commands changed nothing
    finally:
        asyncio.run(ns.drop())


def test_a_broker_without_shared_state_is_refused_by_name() -> None:
    done = m("schedules", "pause", "heartbeat", "--broker", "amqp://guest:guest@127.0.0.1:5672/")
    assert done.returncode != 0
    assert "keeps no shared state" in done.stderr

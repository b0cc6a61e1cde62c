"""``m schedules pause|resume|trigger|backfill`` and the listing against a real shared broker."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest

from framework_m_core.adapters.registry import open_broker
from framework_m_core.app import load_app
from framework_m_core.control import fleet, history, runtime_schedules, steering
from framework_m_core.control.settled import SettledRun
from framework_m_core.ports import decode_message
from framework_m_core.testing import namespace, receive_all

from .conftest import REPO

REDIS = "redis://127.0.0.1:6379/0"


def m(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "framework_m_core", *args],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def announce(url: str, app: str = "examples.heartbeat") -> None:
    """Announce ``app``'s jobs and schedules, as each of its workers does as it starts."""
    loaded = load_app(app)

    async def run() -> None:
        async with open_broker(url) as broker:
            scheduled = [spec.name for spec in loaded.scheduled()]
            assert await fleet.announce(broker, loaded.jobs, scheduled)

    asyncio.run(run())


def refused(done: subprocess.CompletedProcess[str], says: str) -> None:
    """The command failed with one line saying ``says``, and printed nothing else."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert says in line, line


@pytest.mark.parametrize(
    "server", [REDIS, "nats://127.0.0.1:4222", "amqp://guest:guest@127.0.0.1:5672/"]
)
def test_steering_a_queue_nobody_ran_on_is_one_line_on_every_broker(server: str) -> None:
    ns = namespace(server)
    try:  # without its management API RabbitMQ's plan has a warning: not printed here
        refused(m("schedules", "pause", "heartbeat", "--broker", ns.url()), "has no schema")
    finally:
        asyncio.run(ns.drop())


def test_steering_refuses_what_is_not_there_and_changes_nothing() -> None:
    ns = namespace(REDIS)
    url = ns.url()

    async def untouched() -> None:
        async with open_broker(url) as broker:
            for name in ("heartbeat", "nosuchjob", "@nope"):
                assert await steering.read(broker, name) == steering.ScheduleState()
            assert await receive_all(broker) == []
            assert await runtime_schedules.list_schedules(broker) == []

    try:
        refused(m("schedules", "pause", "heartbeat", "--broker", url), "has no schema")
        assert m("sync-schema", "--broker", url).returncode == 0
        refused(m("schedules", "pause", "heartbeat", "--broker", url), "no replica has ever run")
        refused(m("schedules", "set", "t1", "send_email", "--every", "60", "--broker", url),
                "no replica has ever run")  # fmt: skip
        announce(url)
        for action in ("pause", "resume", "trigger"):
            refused(m("schedules", action, "nosuchjob", "--broker", url),
                    "'nosuchjob' is no schedule of any replica announced")  # fmt: skip
            refused(m("schedules", action, "@nope", "--broker", url),
                    "there is no runtime schedule 'nope'")  # fmt: skip
        refused(m("schedules", "pause", "send_email", "--broker", url), "heartbeat")  # unscheduled
        refused(m("schedules", "pause", "every_secnd", "--app", "examples.heartbeat",
                  "--broker", url), "no scheduled job of examples.heartbeat")  # fmt: skip
        refused(m("schedules", "set", "t1", "send_mail", "--every", "60", "--broker", url),
                "'send_mail' is no job any replica announced")  # fmt: skip
        asyncio.run(untouched())

        # a runtime schedule's trigger checks its kwargs against the app
        done = m("schedules", "set", "t1", "send_email", "--every", "3600",
                 "--kwargs", '{"to": "ada"}', "--broker", url)  # fmt: skip
        assert done.returncode == 0, done.stderr
        refused(m("schedules", "trigger", "@t1", "--app", "examples.heartbeat", "--broker", url),
                "subject")  # fmt: skip
        done = m("schedules", "trigger", "@t1", "--kwargs", '{"subject": "hi"}',
                 "--app", "examples.heartbeat", "--broker", url)  # fmt: skip
        assert done.returncode == 0, done.stderr
        listed = m("schedules", "--broker", url)  # no --app: the runtime ones
        assert listed.returncode == 0, listed.stderr
        assert "@t1: " in listed.stdout
        assert "  overlap: unknown without --app" in listed.stdout

        done = m("schedules", "pause", "retired_job", "--force", "--broker", url)
        assert done.returncode == 0, done.stderr
        assert "retired_job: paused" in done.stdout
    finally:
        asyncio.run(ns.drop())


def test_pause_resume_and_trigger_from_the_command_line() -> None:
    ns = namespace(REDIS)
    url = ns.url()
    app = ["--app", "examples.heartbeat", "--broker", url]

    async def state() -> steering.ScheduleState:
        async with open_broker(url) as broker:
            return await steering.read(broker, "heartbeat")

    async def queued() -> list[tuple[str | None, int | None]]:
        async with open_broker(url) as broker:
            messages = [decode_message(d.body) for d in await receive_all(broker)]
            return [(msg.deduplication_id, msg.scheduled_at) for msg in messages]

    try:
        done = m("sync-schema", "--broker", url)
        assert done.returncode == 0, done.stderr
        announce(url)
        done = m("schedules", "pause", "heartbeat", "--reason", "deploy", *app)
        assert done.returncode == 0, done.stderr
        assert "heartbeat: paused;" in done.stdout
        paused = asyncio.run(state())
        assert (paused.paused, paused.reason) == (True, "deploy")
        assert paused.paused_by is not None
        assert paused.paused_by.endswith(f"@{socket.gethostname()} (m schedules)")
        listed = m("schedules", *app)
        assert f"(deploy) by {paused.paused_by}" in listed.stdout, listed.stdout

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


def test_backfill_enqueues_each_slot_of_a_past_range_once_and_the_listing_shows_it() -> None:
    ns = namespace(REDIS)
    url = ns.url()
    app = ["--app", "examples.heartbeat", "--broker", url]
    now = int(time.time())

    def iso(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).isoformat()

    async def queued() -> list[tuple[str | None, int | None]]:
        async with open_broker(url) as broker:
            messages = [decode_message(d.body) for d in await receive_all(broker)]
            return [(msg.deduplication_id, msg.scheduled_at) for msg in messages]

    try:
        assert m("sync-schema", "--broker", url).returncode == 0
        announce(url)
        window = ["--from", iso(now - 10), "--to", iso(now - 6)]
        done = m("schedules", "backfill", "every_second", *window, *app)
        assert done.returncode == 0, done.stderr
        assert "backfilled 5 slot(s), 5 new, 0 already enqueued" in done.stdout
        again = m("schedules", "backfill", "every_second", *window, *app)
        assert "5 slot(s), 0 new, 5 already enqueued" in again.stdout, again.stdout
        slots = list(range(now - 10, now - 5))
        assert asyncio.run(queued()) == [(f"tick:every_second:{s}", s) for s in slots]

        assert m("schedules", "pause", "every_second", "--reason", "deploy", *app).returncode == 0
        listing = m("schedules", "--count", "1", *app)
        assert listing.returncode == 0, listing.stderr
        lines = listing.stdout.split("every_second:", 1)[1].splitlines()[1:]
        block = "\n".join(itertools.takewhile(lambda line: line.startswith("  "), lines))
        assert "  state: paused since " in block, block
        assert "(deploy)" in block, block
        assert f"  last slot: {iso(now - 6)}" in block, block
        assert "  running: no" in block

        for args, why in [
            (["backfill", "every_second", *window, "--broker", url], "needs --app"),
            (["backfill", "every_second", "--from", iso(now - 5), "--to", iso(now + 60), *app],
             "must end in the past"),
            (["backfill", "every_second", "--from", iso(now - 5), "--to", iso(now - 9), *app],
             "start before it ends"),
            (["backfill", "every_second", "--from", iso(now - 5000), "--to", iso(now - 1), *app],
             "more than 1000 slots"),
            (["backfill", "every_second", "--from", "yesterday", "--to", iso(now), *app],
             "not an ISO 8601 time"),
        ]:  # fmt: skip
            done = m("schedules", *args)
            assert done.returncode != 0, (args, done.stdout)
            assert why in done.stderr, (args, done.stderr)
        assert asyncio.run(queued()) == []  # refused commands enqueued nothing
    finally:
        asyncio.run(ns.drop())


def test_runtime_schedules_are_set_listed_steered_and_deleted_from_the_command_line() -> None:
    ns = namespace(REDIS)
    url = ns.url()
    app = ["--app", "examples.heartbeat", "--broker", url]
    try:
        assert m("sync-schema", "--broker", url).returncode == 0
        announce(url)
        done = m("schedules", "set", "tenant-7", "every_second", "--every", "5", *app)
        assert done.returncode == 0, done.stderr
        assert "@tenant-7: every 5s runs every_second" in done.stdout
        done = m(
            "schedules", "set", "tenant-8", "every_second",
            "--cron", "0 9 * * *", "--tz", "Europe/Berlin", "--broker", url,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert m("schedules", "pause", "@tenant-8", "--reason", "holiday", *app).returncode == 0
        listing = m("schedules", "--count", "1", *app)
        assert listing.returncode == 0, listing.stderr
        lines = listing.stdout.splitlines()
        at = lines.index(
            "@tenant-8: cron '0 9 * * *' (Europe/Berlin) runs every_second (set at runtime)"
        )
        assert lines[at + 1] == "  overlap: skip"
        assert lines[at + 2].startswith("  state: paused since ")
        assert "tick:@tenant-8:" in lines[at + 5]
        assert any(line.startswith("@tenant-7: every 5s runs every_second") for line in lines)

        done = m("schedules", "trigger", "@tenant-7", "--broker", url)
        assert done.returncode == 0, done.stderr

        async def queued() -> list[tuple[str, str | None]]:
            async with open_broker(url) as broker:
                messages = [decode_message(d.body) for d in await receive_all(broker)]
                return [(msg.job_name, msg.deduplication_id) for msg in messages]

        [(job, dedup)] = asyncio.run(queued())
        assert job == "every_second"
        assert dedup is not None
        assert dedup.startswith("trigger:@tenant-7:")

        for args, why in [
            (["set", "t", "every_second", "--cron", "61 * * * *", "--broker", url], "61"),
            (["set", "t", "every_second", "--every", "5", "--tz", "UTC", "--broker", url],
             "zone applies to cron"),
            (["set", "bad id", "every_second", "--every", "5", "--broker", url], "schedule id"),
            (["set", "t", "nope", "--every", "5", *app], "unknown job 'nope'"),
            (["set", "t", "every_second", "--every", "5", "--kwargs", '{"x": 1}', *app],
             "--kwargs do not fit"),
            (["set", "t", "every_second", "--broker", url], "one of the arguments"),
            (["delete", "nobody", "--broker", url], "no runtime schedule 'nobody'"),
            (["trigger", "@nobody", "--broker", url], "no runtime schedule 'nobody'"),
        ]:  # fmt: skip
            done = m("schedules", *args)
            assert done.returncode != 0, (args, done.stdout)
            assert why in done.stderr, (args, done.stderr)

        done = m("schedules", "delete", "tenant-7", "--broker", url)
        assert done.returncode == 0, done.stderr
        listing = m("schedules", "--count", "1", *app)
        assert "@tenant-7" not in listing.stdout
        assert "@tenant-8" in listing.stdout
    finally:
        asyncio.run(ns.drop())


def test_history_lists_a_schedule_s_last_runs_and_refuses_a_typo() -> None:
    ns = namespace(REDIS)
    url = ns.url()

    async def record() -> None:
        now = time.time()
        async with open_broker(url) as broker:
            for n, outcome in enumerate(("succeeded", "skipped", "dead_lettered")):
                started = None if outcome == "skipped" else now - 1.5
                error = {"skipped": "still running", "dead_lettered": "ValueError: x"}
                run = SettledRun(
                    f"job{n}", "heartbeat", "web-1:42:ab12cd", 1, outcome, started, now + n,
                    error.get(outcome), 3600 * (n + 1),
                )  # fmt: skip
                assert await history.record_runs(broker, "heartbeat", [run])

    try:
        assert m("sync-schema", "--broker", url).returncode == 0
        announce(url)
        asyncio.run(record())
        shown = m("schedules", "history", "heartbeat", "--broker", url, "--limit", "2")
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert lines[0] == "heartbeat: the last 2 run(s), newest first"
        assert "dead_lettered" in lines[1]
        assert "ValueError: x" in lines[1]
        assert "skipped" in lines[2]
        assert "web-1:42:ab12cd" in lines[2]
        assert len(lines) == 3
        as_json = json.loads(
            m("schedules", "history", "heartbeat", "--broker", url, "--json").stdout
        )
        assert [r["outcome"] for r in as_json["runs"]] == ["dead_lettered", "skipped", "succeeded"]
        assert as_json["runs"][2]["duration"] == pytest.approx(1.5, abs=0.01)
        quiet = m("schedules", "history", "nightly_report", "--broker", url)
        assert quiet.returncode == 0, quiet.stderr
        assert quiet.stdout.startswith("nightly_report: no run recorded")
        refused(m("schedules", "history", "heartbeet", "--broker", url), "heartbeet")
    finally:
        asyncio.run(ns.drop())

"""The ``m`` command as users run it: a real process, its exit code and its output."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from framework_m_core import JobMessage, decode_message, open_broker
from framework_m_core.adapters.registry import connected
from framework_m_core.control import fleet
from framework_m_core.control.shared import shared

M = str(Path(sys.executable).with_name("m"))
REPO = Path(__file__).resolve().parents[3]


def m(*args: str, cwd: Path = REPO, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("M_")}
    return subprocess.run(
        [M, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def one_line_error(result: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("decorator", "message"),
    [
        ('schedule="61 * * * *"', "invalid cron expression '61 * * * *'"),
        ('schedule="0 9 * * *", tz="Mars/Olympus"', "unknown time zone 'Mars/Olympus'"),
        ("every=0.5", "interval must be at least 1 second, got 0.5 s"),
    ],
)
def test_bad_schedules_fail_saying_why_and_where(
    tmp_path: Path, decorator: str, message: str
) -> None:
    (tmp_path / "badapp.py").write_text(
        "from framework_m_core import App\napp = App()\n"
        f"@app.job({decorator})\nasync def job(ctx): ...\n"
    )
    result = m("worker", "--app", "badapp", cwd=tmp_path)
    assert result.returncode == 2
    line, *where = result.stderr.splitlines()
    assert message in line
    assert line.startswith("m: error: cannot import app module 'badapp': ScheduleError")
    assert where[0] == f'  File "{tmp_path / "badapp.py"}", line 3, in <module>'
    assert where[1].strip() == f"@app.job({decorator})"
    assert not any("File" in w for w in where[2:]), "only the app's frames"


def test_app_that_does_not_import(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("import not_a_real_module\n")
    result = m("worker", "--app", "broken", cwd=tmp_path)
    assert result.returncode == 2
    line, *where = result.stderr.splitlines()
    assert "cannot import app module 'broken'" in line
    assert "No module named 'not_a_real_module'" in line
    assert where[0] == f'  File "{tmp_path / "broken.py"}", line 1, in <module>'


def test_an_app_module_that_does_not_exist_is_one_line() -> None:
    line = one_line_error(m("worker", "--app", "no_such_app_module"))
    assert line == (
        "m: error: cannot import app module 'no_such_app_module': "
        "ModuleNotFoundError: No module named 'no_such_app_module'"
    )


def test_missing_app() -> None:
    assert "no app given" in one_line_error(m("worker"))


def test_unknown_scheme_lists_installed_ones() -> None:
    line = one_line_error(m("worker", "--app", "examples.heartbeat", "--broker", "kafka://h:9092"))
    assert "no installed adapter handles kafka://" in line
    assert "memory://" in line


def test_scheme_of_an_uninstalled_adapter_names_the_package_and_hides_the_password() -> None:
    line = one_line_error(
        m("worker", "--app", "examples.heartbeat", "--broker", "kafka+x://u:s3cret@h")
    )
    assert "s3cret" not in line
    line = one_line_error(m("enqueue", "job", "--broker", "zmq://u:s3cret@h"))
    assert "s3cret" not in line
    assert "u:***@h" in line


def test_grace_that_breaks_the_dedup_window_is_refused() -> None:
    line = one_line_error(m("worker", "--app", "examples.heartbeat", "--grace", "200"))
    assert "grace 200s + clock skew 5s = 205s is not below the broker's dedup window" in line


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("memory://?dedup_window=inf", "option 'dedup_window'"),
        ("redis://127.0.0.1:notaport/0", "is malformed"),
        ("nats://[::1", "is malformed"),
        ("redis://app:pa/ss@127.0.0.1:1/0", "'redis://***@127.0.0.1:1/0' is malformed"),
    ],
)
def test_malformed_broker_urls_fail_with_one_line_and_no_password(url: str, message: str) -> None:
    line = one_line_error(m("sync-schema", "--broker", url))
    assert message in line
    assert "pa/ss" not in line


def test_bad_broker_option() -> None:
    line = one_line_error(
        m("worker", "--app", "examples.heartbeat", "--broker", "memory://?dedup_window=soon")
    )
    assert "option 'dedup_window'" in line
    assert "must be a float" in line


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ('{"a": NaN}', "--kwargs is not valid JSON"),
        ("{nope", "--kwargs is not valid JSON"),
        ("[1, 2]", "--kwargs must be a JSON object, got list"),
        ("[" * 60_000 + "]" * 60_000, "--kwargs is nested too deeply"),
    ],
)
def test_enqueue_with_non_json_kwargs(kwargs: str, message: str) -> None:
    assert message in one_line_error(m("enqueue", "send_email", "--kwargs", kwargs))


def test_enqueue_refuses_an_in_process_broker() -> None:
    line = one_line_error(m("enqueue", "send_email", "--kwargs", "{}", "--broker", "memory://"))
    assert "lives inside one process" in line


def test_enqueue_checks_the_job_against_the_app() -> None:
    line = one_line_error(m("enqueue", "nope", "--app", "examples.heartbeat"))
    assert "unknown job 'nope'" in line
    assert "send_email" in line


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ('{"usr": 1}', "--kwargs do not fit job 'send_email': missing a required argument"),
        ('{"to": "a", "subject": "b", "re": 1}', "got an unexpected keyword argument 're'"),
    ],
)
def test_enqueue_checks_the_kwargs_against_the_handler(kwargs: str, message: str) -> None:
    result = m("enqueue", "send_email", "--app", "examples.heartbeat", "--kwargs", kwargs)
    assert message in one_line_error(result)


def test_enqueue_without_the_app_says_nothing_was_checked(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'q.db'}"
    assert m("sync-schema", "--broker", url).returncode == 0
    result = m("enqueue", "sned_email", "--broker", url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()  # the job id
    assert "m: note: 'sned_email' and its kwargs were not checked (pass --app" in result.stderr
    checked = m("enqueue", "send_email", "--app", "examples.heartbeat", "--broker", url,
                "--kwargs", '{"to": "a", "subject": "b"}')  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert "note" not in checked.stderr


def test_schedules_lists_slots_and_dedup_ids() -> None:
    result = m("schedules", "--app", "examples.heartbeat", "--count", "2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "every_second: every 1s" in lines
    assert "nightly_report: cron '30 2 * * *' (Europe/Berlin)" in lines
    ids = [ln.split()[-1] for ln in lines if "tick:every_second:" in ln]
    assert len(ids) == 2
    first, second = (int(i.rsplit(":", 1)[1]) for i in ids)
    assert second == first + 1


def test_sync_schema_dry_run_on_memory() -> None:
    result = m("sync-schema", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert "create queue memory://default: in-process queue" in result.stdout
    assert "note" not in result.stderr


def test_the_former_name_m_migrate_is_refused() -> None:
    result = m("migrate", "--dry-run")
    assert result.returncode == 2
    assert "invalid choice: 'migrate'" in result.stderr


@pytest.fixture
def framework_m_log_level() -> Iterator[None]:
    """``main()`` in-process sets framework-m's log level: put it back for later tests."""
    logger = logging.getLogger("framework_m")
    level = logger.level
    yield
    logger.setLevel(level)


@pytest.mark.usefixtures("framework_m_log_level")
def test_status_shows_a_queue_s_counts_and_schema(capsys: pytest.CaptureFixture[str]) -> None:
    from framework_m_core.adapters.memory import MemoryBroker, reset
    from framework_m_core.cli.main import main

    url = "memory://status-test"
    assert main(["status", "--broker", url]) == 0
    shown = capsys.readouterr().out
    assert "differs: run m sync-schema (1 change(s))" in shown
    assert "ready           -" in shown

    async def fill() -> None:
        async with MemoryBroker.from_url(url) as broker:
            await broker.sync_schema()
            for _ in range(2):
                await broker.enqueue("job")
            [delivery, _] = await broker.receive(2, 1)
            await broker.retry(delivery, 60)

    try:
        asyncio.run(fill())
        assert main(["status", "--broker", url, "--broker", url]) == 0
        shown = capsys.readouterr().out
        assert shown.count("schema          in sync") == 2
        assert "scheduled       1 (0 delayed, 1 retry)" in shown
        assert re.search(r"oldest waiting  \d+\.\ds \(job [0-9a-f]{32}\)", shown), shown
        assert main(["status", "--broker", url, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["schema_in_sync"] is True
        counts = [report[k] for k in ("ready", "reserved", "scheduled", "dead_letters")]
        assert counts == [1, 0, 1, 0]  # the broker closed: the held delivery is ready again
        assert report["oldest_waiting"]["job"] == "job"
    finally:
        reset(url.removeprefix("memory://"))


def test_version_names_core_and_every_installed_adapter() -> None:
    import framework_m_core

    result = m("--version")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"framework-m-core {framework_m_core.__version__}"
    for adapter in ("framework-m-nats", "framework-m-redis", "framework-m-rabbitmq"):
        assert any(line.startswith(f"{adapter} ") for line in lines), lines


def test_a_core_whose_installed_metadata_is_another_release_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from framework_m_core import about

    monkeypatch.setattr(about, "version", lambda name: "0.36.4")
    problem = about.mismatch()
    assert problem is not None
    assert "framework-m-core is 0.36.4" in problem
    assert "another project's" in problem


def test_python_dash_m_is_the_same_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "framework_m_core", "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0
    assert "worker" in result.stdout
    assert "sync-schema" in result.stdout


def test_a_requeued_tick_loses_its_passed_enqueue_deadline() -> None:
    from framework_m_core.tracking.deadletters import fresh

    tick = JobMessage("t", deduplication_id="tick:t:60", scheduled_at=60, not_after=95.0)
    again = decode_message(fresh(tick.encode()))
    assert again.not_after is None
    assert (again.id, again.scheduled_at, again.deduplication_id) == (tick.id, 60, "tick:t:60")
    assert fresh(b"not json") == b"not json"


def test_without_loop_signal_handlers_signals_still_stop_the_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the event loop takes no signal handlers (Windows), signal.signal does."""
    from framework_m_core import App, JobContext, Worker
    from framework_m_core.adapters.memory import MemoryBroker, reset
    from framework_m_core.cli.main import signals_stop

    def refused(*args: object) -> None:
        raise NotImplementedError

    monkeypatch.setattr(asyncio.SelectorEventLoop, "add_signal_handler", refused)
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    app, finished = App(), []

    started = [asyncio.Event(), asyncio.Event()]

    @app.job
    async def slow(ctx: JobContext, n: int) -> None:
        started[n - 1].set()
        await asyncio.sleep(0.3 if n == 1 else 60)
        finished.append(n)

    async def scenario() -> Worker:
        async with MemoryBroker.from_url("memory://signals-test") as broker:
            await broker.sync_schema()
            await broker.enqueue("slow", n=1)
            worker = Worker(app, broker, concurrency=1)
            with signals_stop(worker):
                task = asyncio.create_task(worker.run())
                await asyncio.wait_for(started[0].wait(), 10)
                signal.raise_signal(signal.SIGTERM)  # graceful: the running job finishes
                await asyncio.wait_for(task, 10)
            assert finished == [1]
            await broker.enqueue("slow", n=2)
            worker = Worker(app, broker, concurrency=1)
            with signals_stop(worker):
                task = asyncio.create_task(worker.run())
                await asyncio.wait_for(started[1].wait(), 10)
                signal.raise_signal(signal.SIGINT)
                signal.raise_signal(signal.SIGINT)  # a second one: release the job now
                await asyncio.wait_for(task, 10)
            return worker

    try:
        worker = asyncio.run(scenario())
    finally:
        reset("signals-test")
    assert worker.stats.released == 1
    assert finished == [1]
    assert {s: signal.getsignal(s) for s in before} == before  # put back on exit


def test_a_mistyped_option_after_a_command_gets_that_command_s_usage() -> None:
    result = m("worker", "--concurency", "3")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: m worker ")
    assert "m worker: error: unrecognized arguments: --concurency 3" in result.stderr


def test_output_into_a_reader_that_closed_ends_quietly() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("M_")}
    command = [M, "schedules", "--app", "examples.heartbeat", "--count", "20000"]
    with subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        assert proc.stdout.readline().startswith(b"every_second:")
        proc.stdout.close()  # as `| head -1` does
        errors = proc.stderr.read().decode()
        assert proc.wait(timeout=30) == 0
    assert errors == ""


def test_enqueue_without_a_broker_says_it_needs_a_shared_one() -> None:
    line = one_line_error(m("enqueue", "report"))
    assert line == "m: error: m enqueue needs a shared broker: pass --broker or set M_BROKER_URL"
    assert "default memory://" not in m("enqueue", "--help").stdout


def test_sync_schema_on_memory_shows_the_plan_but_applies_nothing() -> None:
    result = m("sync-schema", "--broker", "memory://")
    assert result.returncode == 2
    assert "create queue memory://default" in result.stdout
    assert "applied" not in result.stdout
    assert "lives inside one process" in result.stderr


def test_an_app_that_fails_to_import_shows_where_in_its_own_code(tmp_path: Path) -> None:
    package = tmp_path / "deep"
    package.mkdir()
    (package / "__init__.py").write_text("from . import settings\n")
    (package / "settings.py").write_text(
        "import json\n\n\ndef load():\n    return json.loads('{a: 1}')\n\n\nCONFIG = load()\n"
    )
    (package / "jobs.py").write_text("from deep import settings\n")
    result = m("schedules", "--app", "deep.jobs", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith("m: error: cannot import app module 'deep.jobs': JSONDecodeError")
    shown = "\n".join(lines[1:])
    assert f'File "{package / "settings.py"}", line 8, in <module>' in shown
    assert f'File "{package / "settings.py"}", line 5, in load' in shown
    assert "importlib" not in shown
    assert "json/decoder.py" not in shown  # the standard library's frames are left out


def test_schedules_shows_each_overlap_policy_and_with_a_broker_what_runs() -> None:
    offline = m("schedules", "--app", "examples.heartbeat", "--count", "1")
    assert offline.returncode == 0, offline.stderr
    assert "  overlap: skip" in offline.stdout.splitlines()
    assert "running:" not in offline.stdout
    url = f"redis://127.0.0.1:6379/0?queue=cli-{uuid.uuid4().hex[:8]}"
    online = m("schedules", "--app", "examples.heartbeat", "--count", "1", "--broker", url)
    assert online.returncode == 0, online.stderr
    assert online.stdout.count("  running: no") == online.stdout.count("  overlap: ")
    refused = m("schedules", "--app", "examples.heartbeat", "--broker", "memory://")
    assert "m schedules --broker would see nothing of the workers" in one_line_error(refused)


def test_status_with_the_app_shows_which_runs_go_on_and_where(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from framework_m_core.cli.main import main
    from framework_m_core.control import keys
    from framework_m_core.control.leases import holder_of
    from framework_m_core.testing import namespace

    ns = namespace("redis://127.0.0.1:6379/0")
    url = ns.url()
    key, holder = keys.overlap("every_second"), holder_of("job1")

    async def lease() -> None:  # held for 30 s unless released: the namespace's drop ends it
        async with connected(open_broker(url)) as broker:
            assert await shared(broker).acquire_lease(key, holder, 30.0)

    asyncio.run(lease())
    try:
        assert main(["status", "--broker", url, "--app", "examples.heartbeat", "--json"]) == 0
        running = json.loads(capsys.readouterr().out)["running"]
        assert running["every_second"] == [holder]
        assert running["nightly_report"] == []
        assert main(["status", "--broker", url, "--app", "examples.heartbeat"]) == 0
        shown = capsys.readouterr().out.splitlines()
        [row] = [line for line in shown if line.startswith("running every_second")]
        assert row.split() == ["running", "every_second", holder]
        [ready] = [line for line in shown if line.startswith("ready ")]
        assert row.index(holder) == ready.index("0")  # the values line up past every label
    finally:
        asyncio.run(ns.drop())


def test_jobs_list_shows_each_state_and_refuses_an_unknown_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from framework_m_core.cli.main import main
    from framework_m_core.control import activity
    from framework_m_core.control.settled import SettledRun
    from framework_m_core.testing import namespace

    ns = namespace("redis://127.0.0.1:6379/0")
    url = ns.url()
    now = time.time()

    async def record() -> None:
        async with connected(open_broker(url)) as broker:
            done = [
                SettledRun("ok1", "report", "web-1:7:aaaaaa", 1, "succeeded", now - 2, now),
                SettledRun("bad1", "report", "web-1:7:aaaaaa", 2, "dead_lettered",
                           now - 1, now + 1, "RuntimeError: nope"),
            ]  # fmt: skip
            assert await activity.add_finished(broker, "web-1:7:aaaaaa", done)

    try:
        asyncio.run(record())
        assert main(["jobs", "list", "--state", "finished", "--broker", url]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == "finished jobs: 1 of 1"
        assert lines[1].split()[1:4] == ["succeeded", "report", "ok1"]
        assert "took 2.000s" in lines[1]
        assert main(["jobs", "list", "--state", "failed", "--broker", url, "--json"]) == 0
        [failed] = json.loads(capsys.readouterr().out)["items"]
        assert (failed["job_id"], failed["error"]) == ("bad1", "RuntimeError: nope")
        assert main(["jobs", "list", "--state", "running", "--job", "x", "--broker", url]) == 0
        assert capsys.readouterr().out == "no running jobs of x\n"
        with pytest.raises(SystemExit) as refused:
            main(["jobs", "list", "--state", "sleeping", "--broker", url])
        assert refused.value.code == 2
        assert "invalid choice: 'sleeping'" in capsys.readouterr().err
    finally:
        asyncio.run(ns.drop())


def test_jobs_cancel_waiting_asks_then_cancels_the_held_jobs_of_one_job(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from framework_m_core.cli.main import main
    from framework_m_core.control.jobs import job_status
    from framework_m_core.testing import namespace

    ns = namespace("redis://127.0.0.1:6379/0")
    url = ns.url()

    async def enqueue() -> tuple[list[str], str]:
        async with connected(open_broker(url)) as broker:
            await broker.sync_schema()
            await fleet.announce(broker, ["report", "other"], [])  # as a worker's start does
            held = [await broker.enqueue("report", n=1), await broker.enqueue_in(600, "report")]
            return held, await broker.enqueue("other")

    async def states(ids: list[str]) -> list[str]:
        async with connected(open_broker(url)) as broker:
            return [str((await job_status(broker, i)).state) for i in ids]

    try:
        held, other = asyncio.run(enqueue())
        monkeypatch.setattr("sys.stdin.isatty", lambda: True)
        monkeypatch.setattr("builtins.input", lambda question: "n")
        assert main(["jobs", "cancel-waiting", "--job", "report", "--broker", url]) == 1
        assert capsys.readouterr().out == "nothing done\n"
        assert asyncio.run(states([*held, other])) == ["queued", "scheduled", "queued"]
        argv = ["jobs", "cancel-waiting", "--job", "report", "--yes", "--broker", url]
        assert main(argv) == 0
        assert capsys.readouterr().out == "cancelled 2 job(s) of report: none of them runs\n"
        assert asyncio.run(states([*held, other])) == ["cancelled", "cancelled", "queued"]
        assert main(argv) == 0
        assert capsys.readouterr().out == "no job of report is waiting\n"
        typo = ["jobs", "cancel-waiting", "--job", "reprot", "--yes", "--broker", url]
        assert main(typo) == 2  # as every command refuses a name nobody announced
        said = capsys.readouterr().err
        assert "'reprot' is no job any replica announced" in said, said
        assert asyncio.run(states([other])) == ["queued"]
    finally:
        asyncio.run(ns.drop())

"""``m``'s logging in real processes: levels, JSON lines, and the application's own setup."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from framework_m_core.testing import namespace
from framework_m_core.testing.scenarios import Processes

from .conftest import REPO

pytestmark = pytest.mark.slow

FAILING_APP = """
from framework_m_core import App

app = App()

@app.job(every=1, max_attempts=1)
async def broken(ctx):
    ctx.log.info("about to fail")
    raise RuntimeError("boom in the handler")
"""


def on_path(tmp_path: Path, source: str, name: str = "failing") -> dict[str, str]:
    (tmp_path / f"{name}.py").write_text(source)
    return {"PYTHONPATH": str(tmp_path)}


def m(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "framework_m_core", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )


def test_the_level_is_read_in_any_case_before_or_after_the_command() -> None:
    for args, env in [
        (["schedules", "--app", "examples.heartbeat", "--log-level", "debug"], {}),
        (["--log-level", "Warning", "schedules", "--app", "examples.heartbeat"], {}),
        (["schedules", "--app", "examples.heartbeat"], {"M_LOG_LEVEL": "debug"}),
    ]:
        done = m(*args, env=env)
        assert done.returncode == 0, done.stderr
        assert "every_second" in done.stdout
    bad = m("schedules", "--app", "examples.heartbeat", "--log-level", "loud")
    assert bad.returncode == 2
    assert "log level must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL" in bad.stderr
    assert "Traceback" not in bad.stderr


def run_failing(procs: Processes, tmp_path: Path, *args: str, source: str = FAILING_APP) -> str:
    """A worker whose ticked job fails once and is dead-lettered; what it logged."""
    worker = procs.m("worker", "--app", "failing", *args, env=on_path(tmp_path, source))
    worker.wait_for("dead-lettered", timeout=20)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    return worker.output


def test_json_lines_carry_the_job_fields_and_the_traceback(
    procs: Processes, tmp_path: Path
) -> None:
    output = run_failing(procs, tmp_path, "--log-format", "json")
    records = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert records, output
    assert all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    [dead, *_] = [r for r in records if "dead-lettered" in r["message"]]
    assert dead["level"] == "ERROR"
    assert (dead["job"], dead["attempt"]) == ("broken", 1)
    assert dead["job_id"] in dead["message"]
    assert isinstance(dead["slot"], int)
    assert "Traceback" in dead["message"]
    assert "RuntimeError: boom in the handler" in dead["message"]
    [own] = [r for r in records if r["message"] == "about to fail"][:1]
    assert own["job_id"] == dead["job_id"]  # ctx.log carries the job's fields


def test_text_lines_carry_the_traceback_with_the_job_id(procs: Processes, tmp_path: Path) -> None:
    output = run_failing(procs, tmp_path)
    [line] = [x for x in output.splitlines() if "dead-lettered" in x][:1]
    assert "ERROR framework_m.job: broken[" in line
    assert "Traceback (most recent call last)" in output
    assert "RuntimeError: boom in the handler" in output


def test_an_app_that_sets_up_logging_keeps_its_setup(procs: Processes, tmp_path: Path) -> None:
    source = "import logging\nlogging.basicConfig(format='APP %(name)s %(message)s')\n"
    output = run_failing(procs, tmp_path, source=source + FAILING_APP)
    assert "APP framework_m.cli worker starting" in output
    assert "APP framework_m.job broken[" in output
    assert not re.search(r"^\d{4}-\d\d-\d\d \S+ (INFO|ERROR) framework_m", output, re.M)


def test_a_log_config_file_is_all_that_is_set_up(procs: Processes, tmp_path: Path) -> None:
    config = {
        "version": 1,
        "formatters": {"f": {"format": "CFG %(levelname)s %(message)s"}},
        "handlers": {"h": {"class": "logging.StreamHandler", "formatter": "f"}},
        "root": {"handlers": ["h"], "level": "INFO"},
    }
    path = tmp_path / "logging.json"
    path.write_text(json.dumps(config))
    output = run_failing(procs, tmp_path, "--log-config", str(path))
    assert "CFG ERROR broken[" in output
    assert "CFG INFO worker starting" in output


def test_a_one_shot_command_prints_no_library_s_info_records() -> None:
    ns = namespace("amqp://guest:guest@127.0.0.1:5672/")
    try:  # a queue whose schema is missing: the plan probes exchanges, which aio-pika logs
        done = m("status", "--broker", ns.url(management="off"))
        assert done.returncode == 0, done.stderr
        assert "schema          differs" in done.stdout
        others = [line for line in done.stderr.splitlines() if " INFO framework_m" not in line]
        assert not [line for line in others if " INFO " in line], done.stderr
        assert "Deleting <Exchange" not in done.stderr + done.stdout
        loud = m("status", "--broker", ns.url(management="off"), "--log-level", "debug")
        assert "INFO aio_pika.exchange: Deleting <Exchange" in loud.stderr  # asked for
    finally:
        asyncio.run(ns.drop())

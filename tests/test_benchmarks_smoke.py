"""The benchmark harness keeps working and always finishes (numbers are not checked):
a tiny run, a subject that hangs, and Ctrl-C."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import time

import pytest

from .conftest import REPO

pytestmark = pytest.mark.slow

ROWS = [
    "enqueue one",
    "enqueue one",
    "enqueue, 100",
    "enqueue a",
    "outbox relay",
    "outbox relay",
    "drain no-op",
    "drain no-op",
    "drain no-op",
    "drain no-op",
    "drain no-op",
    "drain no-op",
    "latency, idle",
    "latency, idle",
    "latency, idle",
    "latency, idle",
    "ticker CPU,",
    "ticker CPU,",
]


def bench(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "benchmarks/run.py", *args],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_benchmark_harness_runs_prints_rows_as_they_come_and_its_duration() -> None:
    out, _ = bench("--quick").communicate(timeout=120)
    streamed, _, table = out.partition("\nall rows:\n")
    assert [" ".join(line.split()[1:3]) for line in streamed.splitlines()[1:]] == ROWS
    assert [" ".join(line.split()[1:3]) for line in table.splitlines()[1 : len(ROWS) + 1]] == ROWS
    assert "the run took" in table.splitlines()[-1]
    p50, p99 = (float(streamed.splitlines()[i].split()[-3]) for i in (13, 15))
    assert 0 < p50 <= p99, "latency rows: p50 and p99 of the same samples, in ms"
    drains = bench("--quick", "--only", "drain").communicate(timeout=120)[0]
    assert [" ".join(line.split()[1:3]) for line in drains.splitlines()[1:4]] == ROWS[6:9]
    sweep = bench("--quick", "--only", "concurrency").communicate(timeout=120)[0]
    subjects = [line.split("worker, ")[1].split()[:2] for line in sweep.splitlines()[1:7]]
    assert subjects == [["concurrency", c] for c in ("1", "10", "25", "50", "100", "200")]


def test_a_subject_that_hangs_or_fails_fails_its_row_and_the_others_go_on() -> None:
    spec = importlib.util.spec_from_file_location("bench_run", REPO / "benchmarks" / "run.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_run"] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)

    async def hangs() -> float:
        await asyncio.Event().wait()
        return 0.0

    async def breaks() -> float:
        raise ConnectionError("peer gone")

    async def works() -> float:
        return 42.0

    subjects = [("hangs", hangs), ("breaks", breaks), ("works", works)]
    got = asyncio.run(module.interleaved(2, subjects, 0.2))
    assert got == [
        ("hangs", 0.0, "no result within 0.2s"),
        ("breaks", 0.0, "ConnectionError: peer gone"),
        ("works", 42.0, None),
    ]


def test_ctrl_c_stops_the_run_at_once_with_what_it_measured() -> None:
    run = bench("-n", "50000", "--rounds", "1")  # about 20 s of work after the first row
    assert run.stdout is not None
    header = run.stdout.readline()
    assert header.startswith("measurement")
    run.stdout.readline()  # a first row: measuring is under way
    run.send_signal(signal.SIGINT)
    interrupted = time.monotonic()
    out, err = run.communicate(timeout=30)
    assert time.monotonic() - interrupted < 5
    assert "interrupted" in err
    assert "the run took" in out


def test_the_latency_stages_script_splits_the_path_in_order() -> None:
    out = subprocess.run(
        [sys.executable, "benchmarks/latency_stages.py", "memory://", "--samples", "20"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    rows = [line.split() for line in out.splitlines()[1:]]
    assert [" ".join(r[:3]) for r in rows] == [
        "enqueue returned p50",
        "receive returned p50",
        "job task started",
        "handler started p50",
    ]
    p50s = [float(r[r.index("p50") + 1]) for r in rows]
    # The worker may receive the job before its enqueue returned (the status create
    # goes beside the publish): only the worker's stages are in order.
    assert p50s[0] > 0, "the enqueue takes time"
    assert 0 < p50s[1] <= p50s[2] <= p50s[3], "each of the worker's stages comes after the last"


def test_the_enqueue_profile_compares_with_the_raw_client_and_names_the_difference() -> None:
    redis_url = os.environ.get("M_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    out = subprocess.run(
        [sys.executable, "benchmarks/profile_enqueue.py", redis_url,
         "-n", "50", "--rounds", "2", "--profile", "--top", "3"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    lines = out.splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["round 1", "round 2"]
    assert "1 in flight: median ratio" in lines[2]
    assert [line.split(":")[0] for line in lines[3:5]] == ["raw", "framework-m"]
    assert len([line for line in lines[6:] if " us " in line and "calls" in line]) == 3

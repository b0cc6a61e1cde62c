"""A tiny run of the benchmark harness, so that it keeps working (numbers are not checked)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import REPO

pytestmark = pytest.mark.slow


def test_benchmark_harness_runs() -> None:
    result = subprocess.run(
        [sys.executable, "benchmarks/run.py", "--quick"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    rows = [" ".join(line.split()[1:3]) for line in result.stdout.splitlines()[1:]]
    assert rows == [
        "enqueue one",
        "enqueue one",
        "enqueue, 100",
        "enqueue a",
        "drain no-op",
        "drain no-op",
        "ticker CPU,",
        "ticker CPU,",
    ]

"""`m worker` against a broker that is not there: a prompt, one-line error, exit code 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .conftest import REPO


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "nats://127.0.0.1:1",
            "m: error: cannot connect to nats://127.0.0.1:1: "
            "nats: no servers available for connection",
        ),
        ("redis://127.0.0.1:1/0", "m: error: cannot connect to redis://127.0.0.1:1/0: "),
    ],
)
def test_an_unreachable_broker_fails_fast_with_a_clear_error(url: str, message: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "framework_m_core",
            "worker",
            "--app",
            "examples.heartbeat",
            "--broker",
            url,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(message)

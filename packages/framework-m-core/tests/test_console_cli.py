"""``m console`` as a command: what it says when it cannot serve."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_a_console_on_a_busy_port_says_so_before_saying_where_it_listens() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "framework_m_core", "console",
             "--broker", "redis://127.0.0.1:6379/0", "--http", f"127.0.0.1:{port}"],
            cwd=REPO, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    said = result.stdout + result.stderr
    assert result.returncode == 2, said
    assert "console on http://" not in said
    [line] = result.stderr.strip().splitlines()
    assert f"the console cannot listen on 127.0.0.1:{port}: Address already in use" in line

"""Helpers for tests that run real ``m`` processes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
M = str(Path(sys.executable).with_name("m"))


class MProcess:
    """A running ``m`` command whose output (stdout and stderr) is collected line by line."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.args = args
        self.proc = subprocess.Popen(
            [M, *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def output(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    def matches(self, pattern: str) -> list[re.Match[str]]:
        rx = re.compile(pattern)
        with self._changed:
            return [m for line in self.lines if (m := rx.search(line))]

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 15.0) -> list[re.Match[str]]:
        """Block until ``pattern`` has matched ``count`` lines; fail with the output otherwise."""
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern)
        with self._changed:
            while True:
                found = [m for line in self.lines if (m := rx.search(line))]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    pytest.fail(
                        f"{pattern!r} x{count} not seen within {timeout:g}s "
                        f"(exit code {self.proc.poll()}):\n" + "\n".join(self.lines[-60:])
                    )
                self._changed.wait(min(left, 0.5))

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = 30.0) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def run_m() -> Iterator[Callable[..., MProcess]]:
    """Start ``m`` processes; any still running at the end are SIGKILLed by pid."""
    started: list[MProcess] = []

    def start(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> MProcess:
        base = {k: v for k, v in os.environ.items() if not k.startswith("M_")}
        base["PYTHONUNBUFFERED"] = "1"
        base.update(env or {})
        proc = MProcess(list(args), cwd, base)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.proc.poll() is None:
            proc.signal(signal.SIGKILL)
        proc.kill()


SLOT_APP = "tests.apps.slot_recorder"


def start_replicas(
    run_m: Callable[..., MProcess], url: str, env: dict[str, str], count: int, *args: str
) -> list[MProcess]:
    """``count`` ``m worker`` processes of the slot-recorder app, each started and ready."""
    workers = [
        run_m("worker", "--app", SLOT_APP, "--broker", url, *args, env=env) for _ in range(count)
    ]
    for w in workers:
        w.wait_for("worker starting: role=")
    return workers


def stop_replicas(workers: list[MProcess]) -> None:
    """SIGTERM every worker and require a clean exit."""
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait() == 0, w.output[-3000:]

"""Real worker processes for multi-process tests: start, watch their output, kill by pid.

Shipped with the contract suite so that third-party adapters run the same
multi-process tests as framework-m's own. Workers are
``sys.executable -m framework_m_core worker``: the adapter must be installed
in the interpreter that runs the tests.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

RECORDER_APP = "framework_m_core.testing.recorder"


class Process:
    """A running command whose output (stdout and stderr) is collected line by line."""

    def __init__(self, command: Sequence[str], cwd: Path | None, env: dict[str, str]) -> None:
        self.args = list(command)
        self.proc = subprocess.Popen(
            self.args,
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

    @property
    def pid(self) -> int:
        return self.proc.pid

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
                    raise AssertionError(
                        f"{pattern!r} x{count} not seen within {timeout:g}s "
                        f"(exit code {self.proc.poll()}) in {' '.join(self.args[-6:])}:\n"
                        + "\n".join(self.lines[-60:])
                    )
                self._changed.wait(min(left, 0.5))

    def signal(self, signum: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)

    def wait(self, timeout: float = 30.0) -> int:
        """The exit code; a process still running after ``timeout`` fails the test with
        its latest output (and is killed)."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGUSR1)  # m worker logs where its tasks wait
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(2)
            self.kill()
            self._reader.join(5)
            raise AssertionError(
                f"still running {timeout:g}s after it was told to stop: "
                f"{' '.join(self.args[-6:])}:\n" + "\n".join(self.lines[-80:])
            ) from None
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class Processes:
    """Starts processes and SIGKILLs by pid whatever is still running when closed."""

    def __init__(self, cwd: Path | None = None) -> None:
        self.cwd = cwd
        self.started: list[Process] = []

    def start(self, *command: str, env: dict[str, str] | None = None) -> Process:
        base = {k: v for k, v in os.environ.items() if not k.startswith("M_")}
        base["PYTHONUNBUFFERED"] = "1"
        base.update(env or {})
        proc = Process(command, self.cwd, base)
        self.started.append(proc)
        return proc

    def m(self, *args: str, env: dict[str, str] | None = None) -> Process:
        """The ``m`` command, run by this interpreter."""
        return self.start(sys.executable, "-m", "framework_m_core", *args, env=env)

    def workers(
        self, url: str, count: int, *args: str, env: dict[str, str] | None = None
    ) -> list[Process]:
        """``count`` ``m worker`` processes of the recorder app, each started and ready."""
        workers = [
            self.m("worker", "--app", RECORDER_APP, "--broker", url, *args, env=env)
            for _ in range(count)
        ]
        for w in workers:
            w.wait_for("worker starting: role=", timeout=30)
        return workers

    def close(self) -> None:
        for proc in self.started:
            proc.signal(signal.SIGKILL)
            proc.kill()


@contextmanager
def processes(cwd: Path | None = None) -> Iterator[Processes]:
    procs = Processes(cwd)
    try:
        yield procs
    finally:
        procs.close()


def wait_ticking(workers: Sequence[Process], timeout: float = 30.0) -> None:
    """Block until every worker's ticker has started: it reads the clock and the runtime
    schedules first, which a broker still electing its leaders can take seconds to
    answer. Slots due before then are not owed."""
    for w in workers:
        w.wait_for(r"ticker started: ", timeout=timeout)


def what_workers_said(workers: Sequence[Process], limit: int = 80) -> str:
    """The workers' warnings, errors and ticker lines, newest last, each with its pid:
    for a failed check's message."""
    said = [
        f"[{w.pid}] {line}"
        for w in workers
        for line in list(w.lines)
        if " WARNING " in line or " ERROR " in line or " INFO framework_m.ticker" in line
    ]
    return "\n".join(said[-limit:])


def stop_all(workers: Sequence[Process], timeout: float = 30.0) -> None:
    """SIGTERM every worker and require a clean exit."""
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        code = w.wait(timeout)
        assert code == 0, f"exit code {code}:\n{w.output[-3000:]}"


# -- the recorder app's logs ------------------------------------------------------------


def slot_runs(path: Path) -> list[tuple[int, int, int]]:
    """``(slot, pid, attempt)`` for each run the recorder logged to ``path``."""
    if not path.exists():
        return []
    lines = (line.split() for line in path.read_text().splitlines() if line)
    return [(int(slot), int(pid), int(attempt)) for slot, pid, attempt, *_ in lines]


def slot_starts(path: Path) -> list[tuple[int, float]]:
    """``(slot, unix time its run started)`` for each run the recorder logged to ``path``."""
    if not path.exists():
        return []
    lines = (line.split() for line in path.read_text().splitlines() if line)
    return [(int(words[0]), float(words[3])) for words in lines]


def wait_for_slot(path: Path, slot: int, timeout: float) -> None:
    """Block until the recorder's slot log holds ``slot`` (or a later one)."""
    deadline = time.monotonic() + timeout
    while True:
        runs = slot_runs(path)
        if runs and max(r[0] for r in runs) >= slot:
            return
        if time.monotonic() > deadline:
            newest = max((r[0] for r in runs), default=None)
            raise AssertionError(f"slot {slot} not run within {timeout:g}s (newest: {newest})")
        time.sleep(0.1)


def assert_each_slot_once(
    runs: list[tuple[int, int, int]],
    first: int,
    last: int,
    *,
    around: Sequence[float] = (),
    redelivery: Sequence[tuple[float, float]] = (),
    outage: tuple[float, float] | None = None,
    workers: Sequence[Process] = (),
    context: str = "",
) -> None:
    """Every slot from ``first`` to ``last`` ran; none was enqueued twice.

    A slot run twice with the same attempt number was enqueued twice. A second run
    with a higher attempt is a redelivery, allowed only within 3 s of an instant in
    ``around`` (a worker was killed after running a slot and before acking it) or for
    a slot inside a ``redelivery`` window (start, end). Slots due during ``outage``
    (start, end) may be missing: the tickers enqueue only the latest slot once the
    broker is back. Slots before ``first`` (a warm-up, a broker still settling) are
    checked only for a second enqueue. A failure's message adds ``context`` (the
    scenario's instants) and what the ``workers`` said.
    """
    try:
        _check_each_slot_once(runs, first, last, around, redelivery, outage)
    except AssertionError as exc:
        said = f"; the workers said:\n{what_workers_said(workers)}" if workers else ""
        raise AssertionError(
            f"{exc}\nfirst slot {first}{', ' if context else ''}{context}{said}"
        ) from None


def _check_each_slot_once(
    runs: list[tuple[int, int, int]],
    first: int,
    last: int,
    around: Sequence[float],
    redelivery: Sequence[tuple[float, float]],
    outage: tuple[float, float] | None,
) -> None:
    count = Counter(slot for slot, _, _ in runs)
    excused = range(int(outage[0]), int(outage[1]) + 1) if outage else range(0)
    missing = [s for s in range(first, last + 1) if count[s] == 0 and s not in excused]
    assert not missing, f"slots never run between {first} and {last}: {missing}"
    attempts = Counter((slot, attempt) for slot, _, attempt in runs)
    twice = sorted({slot for (slot, _), n in attempts.items() if n > 1})
    assert not twice, f"slots enqueued more than once: {twice}"
    redelivered = [s for s, n in count.items() if n > 1 and s >= first]
    unexplained = [
        s
        for s in redelivered
        if not any(abs(s - t) <= 3 for t in around)
        and not any(start <= s <= end for start, end in redelivery)
    ]
    assert not unexplained, f"slots run more than once: {sorted(unexplained)}"


def wait_for_line(path: Path, prefix: str, timeout: float, nth: int = 1) -> list[str]:
    """The ``nth`` line of ``path`` starting with ``prefix``, split into words."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [ln.split() for ln in path.read_text().splitlines()] if path.exists() else []
        found = [ln for ln in lines if ln and ln[0] == prefix]
        if len(found) >= nth:
            return found[nth - 1]
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{len(found)} of {nth} {prefix!r} lines in {path} after {timeout:g}s"
            )
        time.sleep(0.05)


def spans(path: Path) -> list[tuple[float, float | None, str, int, int]]:
    """``(start, end or None, what, pid, attempt)`` of each run logged to ``path`` as
    ``start|end time what pid attempt`` lines (the recorder's overlap and limit logs)."""
    runs: dict[tuple[str, int, int], list[float | None]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            kind, at, what, pid, attempt = line.split()
            run = runs.setdefault((what, int(pid), int(attempt)), [None, None])
            run[0 if kind == "start" else 1] = float(at)
    return [
        (start, end, what, pid, attempt)
        for (what, pid, attempt), (start, end) in runs.items()
        if start is not None
    ]


def most_at_once(runs: Sequence[tuple[float, float | None, str, int, int]], until: float) -> int:
    """The most runs that were running at one instant (a run with no end ran ``until``)."""
    edges = sorted(
        [(start, 1) for start, _, _, _, _ in runs]
        + [(end if end is not None else until, -1) for _, end, _, _, _ in runs]
    )  # at equal times an end (-1) sorts before a start: touching runs do not overlap
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most

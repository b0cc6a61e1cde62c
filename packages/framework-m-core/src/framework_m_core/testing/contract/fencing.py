"""Contract tests of fencing: a replica frozen past its reservations comes back and
neither runs a job another replica took over nor exceeds a limit.

Real ``m worker`` processes stopped with SIGSTOP and resumed with SIGCONT: the frozen
replica's runs, its waiting runs and the deliveries sitting unread in its socket all
outlive their reservations meanwhile, and the other replicas take their jobs.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections import Counter
from pathlib import Path

from ...adapters.registry import open_broker
from ...control.jobs import job_of_slot, job_status
from ...ports.capabilities import Capability
from ...ports.protocols import BrokerProtocol
from ...ports.statuses import JobState
from ..helpers import connected
from ..namespaces import with_option
from ..scenarios import (
    Process,
    Processes,
    most_at_once,
    spans,
    stop_all,
    wait_for_line,
    what_workers_said,
)
from .base import ContractBase
from .process import overlapping_run, processes_marked
from .requirements import DEDUP_WINDOW_IN_URL, SHORT_VISIBILITY, requires

# (kind, unix time, n, pid, attempt) of each line of the recorder's fence log
Line = tuple[str, float, int, int, int]

_JOBS = 45
_LATE_JOBS = 12  # enqueued while the replica is frozen: some reach its socket unread
_FREEZE = 13.0  # seconds
_LIMIT = 3  # the recorder's ``fenced`` concurrency


def _lines(path: Path) -> list[Line]:
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        kind, at, n, pid, attempt = line.split()
        out.append((kind, float(at), int(n), int(pid), int(attempt)))
    return out


def _most_at_once(lines: list[Line], since: float) -> tuple[int, float]:
    """The most runs going on at one instant from ``since`` on, and when: a run goes
    from its ``start`` to its ``end`` or ``stop``."""
    edges = sorted(  # an end (-1) before a start at the same instant
        (at, 1 if kind == "start" else -1)
        for kind, at, _, _, _ in lines
        if kind in ("start", "end", "stop")
    )
    most, worst, now = 0, since, 0
    for at, step in edges:
        now += step
        if at >= since and now > most:
            most, worst = now, at
    return most, worst


@processes_marked
class FencingContract(ContractBase):
    """A frozen replica steps aside for the replicas that took its jobs over."""

    @requires(Capability.CROSS_PROCESS, Capability.STORE, SHORT_VISIBILITY)
    async def test_a_frozen_replica_runs_nothing_twice_and_exceeds_no_limit(
        self, broker: BrokerProtocol, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        """Three worker-only replicas, ``concurrency=3`` across them, 45 one-second
        jobs; one replica is frozen for 13 s from its first start: every job ends once,
        none starts after it ended elsewhere, the frozen runs take no step after the
        resume, and from the resume on never more than 3 run at once."""
        log = tmp_path / "fence.log"
        env = {"FM_SLOT_LOG": str(tmp_path / "slots.log"), "FM_FENCE_LOG": str(log)}
        args = ("--no-scheduler", "--concurrency", "4")
        workers = await asyncio.to_thread(procs.workers, broker_url, 3, *args, env=env)
        ids = {n: await broker.enqueue("fenced", n=n) for n in range(_JOBS - _LATE_JOBS)}
        _, _, _, pid, _ = await asyncio.to_thread(wait_for_line, log, "start", 30)
        frozen = next(w for w in workers if w.pid == int(pid))
        frozen.signal(signal.SIGSTOP)
        stopped_at = time.time()
        try:
            for n in range(_JOBS - _LATE_JOBS, _JOBS):
                ids[n] = await broker.enqueue("fenced", n=n)
            await asyncio.sleep(max(0.0, stopped_at + _FREEZE - time.time()))
        finally:
            frozen.signal(signal.SIGCONT)
        resumed_at = time.time()
        try:
            await asyncio.to_thread(wait_for_line, log, "end", 90, _JOBS)
        except AssertionError as exc:
            ended = {n for kind, _, n, _, _ in _lines(log) if kind == "end"}
            missing = sorted(set(range(_JOBS)) - ended)
            said = [
                f"[{w.pid}] {line}"
                for w in workers
                for line in list(w.lines)
                if any(ids[n] in line for n in missing)
            ]
            stats = await broker.queue_stats()
            raise AssertionError(
                f"{exc}; not ended: {missing}; the queue now: {stats}\n{_told(_lines(log))}\n"
                f"{what_workers_said(workers)}\nabout those:\n" + "\n".join(said)
            ) from None
        await asyncio.to_thread(stop_all, workers)
        _check(_lines(log), frozen, stopped_at, resumed_at)

    @requires(Capability.CROSS_PROCESS, SHORT_VISIBILITY)
    async def test_deliveries_a_frozen_replica_had_not_read_are_not_run_there(
        self, broker: BrokerProtocol, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        """Three idle worker-only replicas, one frozen: jobs enqueued meanwhile reach
        its socket too (its receive was waiting). They are delivered again elsewhere,
        and after the resume the frozen replica reads them and runs none of them (it
        says ``lost before it started``)."""
        slow = tmp_path / "slow.log"
        env = {"FM_SLOT_LOG": str(tmp_path / "slots.log"), "FM_SLOW_LOG": str(slow)}
        workers = await asyncio.to_thread(procs.workers, broker_url, 3, "--no-scheduler", env=env)
        warm = [await broker.enqueue("slow", seconds=0.05) for _ in range(9)]
        await asyncio.to_thread(wait_for_line, slow, "end", 30, len(warm))
        await asyncio.sleep(0.3)  # every replica is waiting in a receive again
        frozen = workers[0]
        frozen.signal(signal.SIGSTOP)
        try:
            ids = warm + [await broker.enqueue("slow", seconds=0.05) for _ in range(20)]
            await asyncio.to_thread(wait_for_line, slow, "end", 60, len(ids))
            await asyncio.sleep(max(2.0, 3 * broker.visibility_timeout))
        finally:
            frozen.signal(signal.SIGCONT)
        # what it had read before the freeze, or reads after it, shows within seconds
        await asyncio.sleep(max(3.0, 3 * broker.visibility_timeout))
        await asyncio.to_thread(stop_all, workers)
        lines = slow.read_text().splitlines()
        ends = Counter(line.split()[1] for line in lines if line.startswith("end "))
        assert sorted(ends) == sorted(ids), slow.read_text()
        twice = [job for job, count in ends.items() if count > 1]
        assert not twice, f"run twice: {twice}\n{slow.read_text()}\n{frozen.output[-3000:]}"
        # every job had ended before the resume: a run there was a stale delivery
        there = {line.split()[1] for line in lines if line.split()[2] == str(frozen.pid)}
        ran_there = there - set(warm)
        assert not ran_there, f"run on the frozen replica after the resume: {ran_there}"

    @requires(Capability.CROSS_PROCESS, Capability.STORE, SHORT_VISIBILITY, DEDUP_WINDOW_IN_URL)
    async def test_a_frozen_holder_of_a_skip_schedule_is_stopped_and_writes_no_status(
        self, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        """Three ticking replicas, a 1-s schedule whose runs take 2.5 s, overlap="skip";
        the replica of the run going on is frozen for 6 s: its run is stopped within 2 s
        of the resume, takes no step, writes no status, and runs never overlap from
        then on."""
        log = tmp_path / "overlap.log"
        url = with_option(broker_url, "dedup_window", 30)
        workers, running = await overlapping_run(procs, url, tmp_path, log)
        _, _, slot, pid, attempt = running[0]
        holder = next(w for w in workers if w.pid == pid)
        holder.signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(6)
        finally:
            holder.signal(signal.SIGCONT)
        resumed_at = time.time()
        starts = len(spans(log))
        await asyncio.to_thread(wait_for_line, log, "start", 30, starts + 2)
        await asyncio.to_thread(stop_all, workers)
        said = log.read_text()
        mine = [line.split() for line in said.splitlines()]
        frozen = [w for w in mine if w[2:] == [slot, str(pid), str(attempt)]]
        assert [w[0] for w in frozen] == ["start", "stop"], said
        assert float(frozen[1][1]) - resumed_at < 2, f"stopped late: {frozen}"
        back = float(frozen[1][1])
        runs = [r for r in spans(log) if r[1] is None or r[1] > back]
        assert most_at_once(runs, time.time()) == 1, sorted(runs)
        job = re.escape("overlapping[")
        lost = holder.matches(job + r"(\w+)\] lost while it ran: ")
        assert lost, holder.output[-3000:]
        async with connected(lambda: open_broker(url), sync=False) as asker:
            job_id = await job_of_slot(asker, "overlapping", int(slot))
            assert job_id is not None
            assert job_id == lost[0].group(1)
            status = await job_status(asker, job_id)
        # the replica that took the slot over wrote it; the frozen run wrote nothing
        assert status.state is not JobState.RUNNING, status
        assert status.attempts > int(attempt), status


def _told(lines: list[Line]) -> str:
    return "\n".join(" ".join(map(str, line)) for line in sorted(lines, key=lambda x: x[1]))


def _check(lines: list[Line], frozen: Process, stopped_at: float, resumed_at: float) -> None:
    context = _told(lines)
    ends = Counter(n for kind, _, n, _, _ in lines if kind == "end")
    assert sorted(ends) == list(range(_JOBS)), context
    twice = sorted(n for n, count in ends.items() if count > 1)
    assert not twice, f"jobs run to completion twice: {twice}\n{context}"
    first_end = {n: at for kind, at, n, _, _ in sorted(lines, key=lambda x: x[1]) if kind == "end"}
    late = [
        (n, at)
        for kind, at, n, _, _ in lines
        if kind == "start" and at > first_end.setdefault(n, at)
    ]
    assert not late, f"started after another run had ended the job: {late}\n{context}"
    before = {(n, a) for kind, at, n, pid, a in lines if pid == frozen.pid and at < stopped_at}
    after = [
        (kind, n, at)
        for kind, at, n, pid, a in lines
        if pid == frozen.pid and (n, a) in before and at >= resumed_at and kind != "stop"
    ]
    assert not after, f"a frozen run went on after the resume: {after}\n{context}"
    stops = [at for kind, at, n, pid, _ in lines if pid == frozen.pid and kind == "stop"]
    # the frozen replica is back once it stopped its runs (the first pass of its loop)
    back = max([resumed_at, *stops])
    assert back - resumed_at < 2, f"frozen runs stopped {back - resumed_at:.1f}s after resume"
    most, when = _most_at_once(lines, back)
    assert most <= _LIMIT, f"{most} ran at once at {when:.3f} (back at {back:.3f})\n{context}"
    assert frozen.matches(r"\] lost (while it ran|while it waited|before it started): "), (
        frozen.output[-3000:]
    )

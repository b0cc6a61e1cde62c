"""Contract tests across processes: what only shows when replicas are separate programs.

An adapter that deduplicates in a per-process table passes every one-process
test; these publish from several processes at once and run real ``m worker``
processes against the test's URL, killing one with SIGKILL.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import math
import re
import signal
import sys
import time
import uuid
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import pytest

from ...adapters.registry import open_broker
from ...app import App
from ...control import runtime_schedules, steering
from ...control.jobs import cancel_job, job_status, wait_result
from ...control.shared import shared
from ...errors import JobFailedError
from ...jobs import JobContext
from ...ports.capabilities import Capability
from ...ports.messages import decode_message, new_job_id
from ...ports.protocols import BrokerProtocol
from ...ports.records import BatchJob
from ...ports.statuses import JobState
from ..helpers import connected, receive_all, wait_until
from ..namespaces import with_credentials, with_option
from ..scenarios import (
    RECORDER_APP,
    Process,
    Processes,
    assert_each_slot_once,
    most_at_once,
    slot_runs,
    spans,
    stop_all,
    wait_for_line,
    wait_for_slot,
)
from .base import ContractBase
from .requirements import (
    DEDUP_WINDOW_IN_URL,
    SHORT_VISIBILITY,
    SINGLE_HOST,
    any_of,
    requires,
)

T = TypeVar("T")


def processes_marked(cls: type[T]) -> type[T]:
    """Mark each test the class defines ``processes`` (the mixin's own tests only: a
    class-level mark would spread to every test of the hook-up class)."""
    for name, test in list(vars(cls).items()):
        if name.startswith("test_"):
            setattr(cls, name, pytest.mark.processes(test))
    return cls


@processes_marked
class ProcessContract(ContractBase):
    """Several processes on one broker URL: publishers racing, workers ticking and dying."""

    @requires(Capability.CROSS_PROCESS)
    async def test_processes_publishing_the_same_ids_at_once_store_one_job_per_id(
        self, broker: BrokerProtocol, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        dedup_ids = [f"tick:race:{i}" for i in range(20)]
        go = tmp_path / "go"
        publishers = [
            procs.start(
                sys.executable,
                "-m",
                "framework_m_core.testing.publisher",
                broker_url,
                str(go),
                *dedup_ids,
            )
            for _ in range(4)
        ]
        for p in publishers:
            await asyncio.to_thread(p.wait_for, "^ready$", timeout=30)
        go.touch()
        answers = []
        for p in publishers:
            assert await asyncio.to_thread(p.wait, 60) == 0, p.output
            answers.append(json.loads(p.output.splitlines()[-1]))
        messages = [decode_message(d.body) for d in await receive_all(broker)]
        stored_ids = sorted(str(m.deduplication_id) for m in messages)
        assert stored_ids == sorted(dedup_ids), "not exactly one job per id"
        stored = {m.deduplication_id: m.id for m in messages}
        for dedup_id in dedup_ids:
            said = [answer[dedup_id] for answer in answers]
            assert {job_id for job_id, _ in said} == {stored[dedup_id]}
            assert [duplicate for _, duplicate in said].count(False) == 1

    @requires(Capability.CROSS_PROCESS, DEDUP_WINDOW_IN_URL)
    async def test_worker_processes_run_each_slot_once_while_one_is_killed(
        self, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        log = tmp_path / "slots.log"
        # A window that leaves the tickers their default grace: a loaded machine is late.
        url = with_option(broker_url, "dedup_window", 30)
        workers = await asyncio.to_thread(procs.workers, url, 3, env={"FM_SLOT_LOG": str(log)})
        first = int(time.time()) + 1
        await asyncio.to_thread(wait_for_slot, log, first + 3, timeout=20)
        workers[0].signal(signal.SIGKILL)
        killed_at = time.time()
        await asyncio.to_thread(wait_for_slot, log, int(killed_at) + 4, timeout=20)
        last = int(time.time()) - 2
        await asyncio.to_thread(stop_all, workers[1:])
        assert_each_slot_once(
            slot_runs(log),
            first,
            last,
            around=[killed_at],
            workers=workers,
            context=f"killed {killed_at:.3f}",
        )
        assert last - first >= 5

    @requires(
        Capability.CROSS_PROCESS, any_of(Capability.REDELIVER_ON_DISCONNECT, SHORT_VISIBILITY)
    )
    async def test_a_job_whose_worker_is_killed_is_completed_by_another(
        self, broker: BrokerProtocol, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        slow = tmp_path / "slow.log"
        env = {"FM_SLOT_LOG": str(tmp_path / "slots.log"), "FM_SLOW_LOG": str(slow)}
        workers = await asyncio.to_thread(procs.workers, broker_url, 2, "--no-scheduler", env=env)
        job_id = await broker.enqueue("slow", seconds=2)
        _, started, pid, attempt = await asyncio.to_thread(wait_for_line, slow, "start", 20)
        assert (started, attempt) == (job_id, "1")
        running = next(w for w in workers if w.pid == int(pid))
        running.signal(signal.SIGKILL)
        wait = min(broker.visibility_timeout, 30.0) + 20
        _, again, other_pid, again_attempt = await asyncio.to_thread(
            wait_for_line, slow, "start", wait, 2
        )
        # A redelivery, counted. Not necessarily the second delivery: the killed worker's
        # last pull request can outlive it on the server (NATS 2.9 serves it until it
        # expires), and a delivery sent there comes back once more after its ack wait.
        assert again == job_id
        assert int(again_attempt) >= 2, again_attempt
        assert int(other_pid) != running.pid
        _, done, done_pid, _ = await asyncio.to_thread(wait_for_line, slow, "end", 20)
        assert (done, int(done_pid)) == (job_id, int(other_pid))
        await asyncio.to_thread(stop_all, [w for w in workers if w is not running])

    @requires(Capability.CROSS_PROCESS)
    async def test_workers_without_the_scheduler_publish_no_ticks(
        self, broker: BrokerProtocol, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        env = {"FM_SLOT_LOG": str(tmp_path / "slots.log")}
        workers = await asyncio.to_thread(procs.workers, broker_url, 2, "--no-scheduler", env=env)
        for w in workers:
            assert w.matches("worker starting: role=worker ")
        await asyncio.sleep(2.5)  # two slot boundaries pass; a ticker would have published
        await asyncio.to_thread(stop_all, workers)
        assert list(await receive_all(broker)) == []
        assert not (tmp_path / "slots.log").exists()

    @requires(Capability.CROSS_PROCESS, SINGLE_HOST)
    async def test_a_worker_never_prints_the_password_of_its_broker_url(
        self, broker_url: str, procs: Processes
    ) -> None:
        secret = f"pw-{uuid.uuid4().hex}"
        url = with_credentials(broker_url, "fmuser", secret)
        worker = procs.m("worker", "--app", RECORDER_APP, "--broker", url, "--no-scheduler")
        try:  # it starts (a server without authentication), or says why it waits or stops
            pattern = "worker starting: role=|m: error: |broker out of reach at start"
            await asyncio.to_thread(worker.wait_for, pattern, 1, 30)
        finally:
            worker.signal(signal.SIGTERM)
            await asyncio.to_thread(worker.wait, 30)
        assert worker.output
        assert secret not in worker.output
        assert "fmuser:***@" in worker.output

    @requires(Capability.CROSS_PROCESS, Capability.STORE, DEDUP_WINDOW_IN_URL)
    async def test_runs_of_a_skip_schedule_never_overlap_while_the_holder_is_killed(
        self, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        """Three ticking replicas, a 1-s schedule whose runs take 2.5 s, overlap="skip"."""
        log = tmp_path / "overlap.log"
        url = with_option(broker_url, "dedup_window", 30)
        workers, running = await overlapping_run(procs, url, tmp_path, log)
        holder = next(w for w in workers if w.pid == running[0][3])
        holder.signal(signal.SIGKILL)
        killed_at = time.time()
        starts_before = len(spans(log))
        # Runs go on: two more start (the first after the dead holder's lease is freed).
        await asyncio.to_thread(wait_for_line, log, "start", 60, starts_before + 2)
        await asyncio.to_thread(stop_all, [w for w in workers if w is not holder])
        runs = spans(log)
        assert most_at_once(runs, killed_at) == 1, sorted(runs)
        assert all(end is not None for _, end, _, pid, _ in runs if pid != holder.pid)
        first_tries = [what for _, _, what, _, attempt in runs if attempt == 1]
        assert len(first_tries) == len(set(first_tries)), "a slot was enqueued twice"
        again = [what for _, _, what, _, attempt in runs if attempt > 1]
        assert again == [w for w in again if w == running[0][2]], "only the killed run redone"
        slots = sorted(int(what) for what in first_tries)
        assert slots[-1] - slots[0] >= len(slots)  # slots came while runs ran: skipped
        async with connected(lambda: open_broker(url), sync=False) as broker:
            assert list(await shared(broker).lease_holders("overlap:overlapping")) == []

    @requires(Capability.CROSS_PROCESS, Capability.STORE)
    async def test_a_concurrency_limit_holds_across_worker_processes(
        self, broker: BrokerProtocol, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        """concurrency=2 across three worker-only replicas: 16 jobs, each run once."""
        log = tmp_path / "limit.log"
        env = {"FM_SLOT_LOG": str(tmp_path / "slots.log"), "FM_LIMIT_LOG": str(log)}
        # Two places each, so that the jobs spread over the replicas and the limit is
        # held between processes, not only inside one.
        args = ("--no-scheduler", "--concurrency", "2")
        workers = await asyncio.to_thread(procs.workers, broker_url, 3, *args, env=env)
        for n in range(16):
            await broker.enqueue("limited", n=n)
        await asyncio.to_thread(wait_for_line, log, "end", 90, 16)
        await asyncio.to_thread(stop_all, workers)
        runs = spans(log)
        assert sorted(int(what) for _, _, what, _, _ in runs) == list(range(16)), sorted(runs)
        assert all(attempt == 1 for _, _, _, _, attempt in runs)
        assert most_at_once(runs, time.time()) == 2
        assert len({pid for _, _, _, pid, _ in runs}) >= 2  # the replicas shared the work
        assert list(await shared(broker).lease_holders("concurrency:limited", limit=2)) == []

    @requires(Capability.CROSS_PROCESS, Capability.STORE)
    async def test_a_rate_limit_per_key_holds_across_worker_processes(
        self, broker: BrokerProtocol, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        """rate_limit="10/s" per tenant across three worker-only replicas: 200 jobs of
        two tenants, no second of either starting more than 10, each run once, the
        tenants done within 10% of each other."""
        log = tmp_path / "rate.log"
        env = {"FM_SLOT_LOG": str(tmp_path / "slots.log"), "FM_RATE_LOG": str(log)}
        # Five places each: a worker holds at most ten deliveries, so the waiting runs
        # spread over the replicas and their heartbeats keep a 1 s reservation.
        args = ("--no-scheduler", "--concurrency", "5")
        workers = await asyncio.to_thread(procs.workers, broker_url, 3, *args, env=env)
        began = time.time()
        await broker.enqueue_many(
            [BatchJob("rated", {"n": n, "tenant": "ab"[n % 2]}) for n in range(200)]
        )
        await asyncio.to_thread(wait_for_line, log, "start", 120, 200)
        await asyncio.to_thread(stop_all, workers)
        runs = [line.split() for line in log.read_text().splitlines()]
        said = "\n".join(line for w in workers for line in w.lines if "WARNING" in line)
        assert sorted(int(n) for _, _, _, n, _, _ in runs) == list(range(200)), said
        assert all(attempt == "1" for *_, attempt in runs), said
        assert len({pid for _, _, _, _, pid, _ in runs}) >= 2  # the replicas shared the work
        took = {}
        for tenant in "ab":
            starts = sorted(float(at) for _, at, who, _, _, _ in runs if who == tenant)
            busiest = max(bisect.bisect_left(starts, at + 1.0) - i for i, at in enumerate(starts))
            assert busiest <= 10, f"tenant {tenant}: {busiest} starts within one second"
            took[tenant] = starts[-1] - began
            assert took[tenant] >= 9.0  # 100 starts at 10 a second
        assert abs(took["a"] - took["b"]) <= 0.1 * max(took.values()), took

    @requires(Capability.CROSS_PROCESS, Capability.STORE)
    async def test_a_unique_job_s_key_frees_when_its_worker_is_killed(
        self, broker: BrokerProtocol, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        """50 enqueues of a unique job while it runs in a worker process return its id
        (each leading to a status) and store nothing; SIGKILLed, its key frees."""
        log = tmp_path / "unique.log"
        env = {"FM_SLOT_LOG": str(tmp_path / "slots.log"), "FM_UNIQUE_LOG": str(log)}
        (worker,) = await asyncio.to_thread(procs.workers, broker_url, 1, "--no-scheduler", env=env)
        app = App()  # the recorder's job, as a producer defines it

        @app.job(unique=("tenant",))
        async def unique_sleeper(ctx: JobContext, tenant: str) -> None: ...

        first = await unique_sleeper.enqueue(broker, tenant="t1")
        await asyncio.to_thread(wait_for_line, log, "start", 30)
        again = [await unique_sleeper.enqueue(broker, tenant="t1") for _ in range(50)]
        assert set(again) == {first}
        state = (await job_status(broker, first)).state
        assert state in (JobState.QUEUED, JobState.RUNNING), state
        worker.kill()
        freed = time.monotonic() + 45  # the run's lease ttl (30 s at most), and a margin
        while (after := await unique_sleeper.enqueue(broker, tenant="t1")) == first:
            assert time.monotonic() < freed, "the killed worker's key never freed"
            await asyncio.sleep(0.2)
        assert (await job_status(broker, after)).state is JobState.QUEUED
        assert [line.split()[1] for line in log.read_text().splitlines()] == [first]

    @requires(Capability.CROSS_PROCESS, Capability.STORE, Capability.DELAYED_ENQUEUE)
    async def test_a_debounced_burst_runs_once_with_the_last_arguments(
        self, broker: BrokerProtocol, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        """30 enqueues 100 ms apart of a debounce=1 job, three worker-only replicas: one
        run, of the last, starting a second after it (within the tick); the others
        settled unrun."""
        log = tmp_path / "debounce.log"
        env = {"FM_SLOT_LOG": str(tmp_path / "slots.log"), "FM_DEBOUNCE_LOG": str(log)}
        workers = await asyncio.to_thread(procs.workers, broker_url, 3, "--no-scheduler", env=env)
        app = App()  # the recorder's job, as a producer defines it

        @app.job(debounce=1)
        async def debounced(ctx: JobContext, n: int) -> None: ...

        ids = []
        for n in range(30):
            await asyncio.sleep(0.1 if n else 0)
            ids.append(await debounced.enqueue(broker, n=n))
        last = time.time()  # the last enqueue returned

        async def settled() -> bool:
            states = [(await job_status(broker, i)).state for i in ids]
            return all(state.finished for state in states)

        await wait_until(settled, timeout=30, what="every enqueue settled")
        await asyncio.to_thread(stop_all, workers)
        runs = [line.split() for line in log.read_text().splitlines()]
        assert [n for _, _, n, _, _ in runs] == ["29"], runs
        # Due a second after it was sent (a broker rounds to its ms), started within the tick.
        assert 1.0 - 0.05 <= float(runs[0][1]) - last <= 2.0, float(runs[0][1]) - last
        assert (await job_status(broker, ids[-1])).state is JobState.SUCCEEDED
        assert (await job_status(broker, ids[0])).state is JobState.CANCELLED

    @requires(Capability.CROSS_PROCESS, Capability.STORE, DEDUP_WINDOW_IN_URL)
    async def test_replicas_obey_pause_trigger_and_resume_of_a_schedule(
        self, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        """Three ticking replicas: once pause returns no slot of ``steered`` runs until
        resume, then each runs once; a trigger of ``hourly`` runs it once."""
        log = tmp_path / "steer.log"
        env = {"FM_SLOT_LOG": str(tmp_path / "slots.log"), "FM_STEER_LOG": str(log)}
        url = with_option(broker_url, "dedup_window", 30)
        workers = await asyncio.to_thread(procs.workers, url, 3, env=env)
        first = int(time.time()) + 1
        await asyncio.to_thread(wait_for_line, log, "steered", 20, 2)
        async with connected(lambda: open_broker(url), sync=False) as operator:
            await steering.pause(operator, "steered", reason="contract")
            paused = time.time()
            for w in workers:  # each replica says so at its next tick
                await asyncio.to_thread(w.wait_for, r"steered: paused \(contract\)", 1, 15)
            job_id = await steering.trigger(operator, "hourly")
            await asyncio.to_thread(wait_for_line, log, "hourly", 20)
            await asyncio.sleep(1.5)  # what must not happen needs time to show: slots pass
            resuming = time.time()
            await steering.resume(operator, "steered")
            resumed = time.time()
            await asyncio.to_thread(_wait_for_steered, log, math.ceil(resumed) + 3, 20)
            last = int(time.time()) - 2
            await asyncio.to_thread(stop_all, workers)
            left = [decode_message(d.body) for d in await receive_all(operator)]
        steered = [(s, pid, n) for name, s, pid, n, _ in _steer_runs(log) if name == "steered"]
        # A tick running late may read the state after resume began, and a state that
        # cannot be read in time pauses nothing: the replicas say so for those slots.
        allowed = _ticked_unpaused(line for w in workers for line in w.lines)
        during = sorted(s for s, _, _ in steered if paused < s < resuming and s not in allowed)
        assert not during, f"slots ran while paused ({paused:.2f} to {resuming:.2f}): {during}"
        assert_each_slot_once([r for r in steered if r[0] <= paused], first, math.floor(paused))
        assert_each_slot_once([r for r in steered if r[0] > resumed], math.ceil(resumed), last)
        # A run of hourly's own slot (the workers up at the top of an hour) is no trigger.
        triggered = [r for r in _steer_runs(log) if r[0] == "hourly" and r[4] != "None"]
        triggered = [r for r in triggered if not r[4].startswith("tick:hourly:")]
        assert [(r[3], r[4].startswith("trigger:hourly:")) for r in triggered] == [(1, True)]
        assert abs(triggered[0][1] - paused) < 20  # ctx.scheduled_at: the trigger's time
        assert not [m for m in left if m.job_name == "hourly"], "a trigger is left to run"
        assert job_id

    @requires(Capability.CROSS_PROCESS, Capability.STORE, DEDUP_WINDOW_IN_URL)
    async def test_a_slot_every_replica_missed_runs_once_as_they_come_back_one_by_one(
        self, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        """A 10-s schedule with catchup_window=600, a 6-s dedup window and 1 s of grace:
        every replica down over one slot, then back one at a time, each more than the
        dedup window after the slot before it: the missed slot runs once, none twice."""
        log = tmp_path / "caught.log"
        env = {"FM_SLOT_LOG": str(tmp_path / "slots.log"), "FM_CATCHUP_LOG": str(log)}
        url = with_option(broker_url, "dedup_window", 6)
        args = ("--grace", "1", "--clock-skew", "1")
        workers = await asyncio.to_thread(procs.workers, url, 3, *args, env=env)
        ran = (int(time.time()) // 10 + 1) * 10
        await asyncio.to_thread(wait_for_slot, log, ran, 30)
        await asyncio.to_thread(stop_all, workers)
        missed = ran + 10
        assert time.time() < missed - 1, "every replica had to be down before the slot"

        async def back_at(t: float) -> Process:
            await asyncio.sleep(max(0.0, t - time.time()))
            [replica] = await asyncio.to_thread(procs.workers, url, 1, *args, env=env)
            return replica

        first = await back_at(missed + 1.5)  # the slot is past grace: only catch-up runs it
        await asyncio.to_thread(wait_for_slot, log, missed, 20)
        second = await back_at(missed + 17)  # > 6 s after slot missed + 10, as below
        third = await back_at(missed + 27)
        await asyncio.to_thread(wait_for_slot, log, missed + 30, 20)
        await asyncio.to_thread(stop_all, [first, second, third])
        runs = sorted(slot_runs(log))
        expected = range(ran, missed + 31, 10)
        assert [(s, n) for s, _, n in runs if s >= ran] == [(s, 1) for s in expected], runs
        assert first.matches("enqueued missed slot")
        assert not second.matches("enqueued missed slot")
        assert not third.matches("enqueued missed slot")

    @requires(
        Capability.CROSS_PROCESS,
        Capability.STORE,
        Capability.STORE,
        Capability.DELAYED_ENQUEUE,
    )
    async def test_statuses_results_and_cancels_reach_across_processes(
        self, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        """Two worker-only replicas run the jobs; this process asks: a sum comes back, a
        failure raises with its error, a job delayed 8 s says scheduled and once
        cancelled never runs, a running 30 s job is stopped within 2 s and not retried,
        and an id never enqueued is unknown."""
        log = tmp_path / "status.log"
        log.touch()
        env = {"FM_STATUS_LOG": str(log)}
        workers = await asyncio.to_thread(procs.workers, broker_url, 2, "--no-scheduler", env=env)
        async with connected(lambda: open_broker(broker_url), sync=False) as asker:
            summed = await asker.enqueue("add", a=2, b=40)
            failing = await asker.enqueue("always_fails")
            delayed = await asker.enqueue_in(8, "marked")
            sleeping = await asker.enqueue("sleeps_30")
            assert await wait_result(asker, summed, timeout=30) == 42
            assert (await job_status(asker, summed)).state is JobState.SUCCEEDED
            with pytest.raises(JobFailedError) as failed:
                await wait_result(asker, failing, timeout=30)
            assert "RuntimeError: failing on purpose" in (failed.value.error or "")
            assert (await job_status(asker, failing)).state is JobState.FAILED
            waiting = await job_status(asker, delayed)
            assert waiting.state is JobState.SCHEDULED, waiting
            assert await cancel_job(asker, delayed) is True
            await wait_until(lambda: " start" in log.read_text(), timeout=30)
            asked = time.monotonic()
            assert await cancel_job(asker, sleeping) is True
            await wait_until(lambda: " stopped" in log.read_text(), timeout=10)
            took = time.monotonic() - asked
            assert (await job_status(asker, new_job_id())).state is JobState.UNKNOWN
            assert waiting.due_at is not None
            await asyncio.sleep(max(0.0, waiting.due_at + 2 - time.time()))  # its time passes
            ended = [await job_status(asker, j) for j in (delayed, sleeping)]
        await asyncio.to_thread(stop_all, workers)
        lines = log.read_text().splitlines()
        assert took < 4, f"stopped {took:.1f}s after the cancel (2 s promised)"
        assert [s.state for s in ended] == [JobState.CANCELLED] * 2, ended
        assert not [line for line in lines if line.startswith("marked")], lines
        assert [line.split()[-1] for line in lines if line.startswith("sleeps_30")] == [
            "start",
            "stopped",
        ], lines  # one attempt, stopped, never retried
        said = r"worker stopped: .* (\d+) cancelled"
        cancelled = [int(m.group(1)) for w in workers for m in w.matches(said)]
        assert len(cancelled) == 2, [w.output[-500:] for w in workers]
        assert sum(cancelled) >= 1, cancelled  # the stopped run (the delayed one if delivered)

    @requires(Capability.CROSS_PROCESS, Capability.STORE, DEDUP_WINDOW_IN_URL)
    async def test_replicas_run_a_runtime_schedule_as_set_changed_and_deleted(
        self, broker_url: str, procs: Processes, tmp_path: Path
    ) -> None:
        """Three ticking replicas: a runtime schedule runs each slot once from 5 s after
        ``set``; set again (another interval and kwargs), only the new version runs from
        5 s later, also once two replicas are SIGKILLed and a new one started; after
        ``delete`` nothing runs from 5 s later."""
        log = tmp_path / "runtime_schedules.log"
        env = {"FM_SLOT_LOG": str(tmp_path / "slots.log"), "FM_RUNTIME_LOG": str(log)}
        url = with_option(broker_url, "dedup_window", 30)
        workers = await asyncio.to_thread(procs.workers, url, 3, env=env)
        async with connected(lambda: open_broker(url), sync=False) as steering:
            first = runtime_schedules.runtime_schedule(
                "tenant-1", "tenant_report", every_seconds=1, kwargs={"tenant": 1}
            )
            await runtime_schedules.set_schedule(steering, first)
            set_at = time.time()
            await asyncio.to_thread(_wait_for_runtime, log, math.ceil(set_at) + 8, 30)
            second = runtime_schedules.runtime_schedule(
                "tenant-1", "tenant_report", every_seconds=2, kwargs={"tenant": 2}
            )
            await runtime_schedules.set_schedule(steering, second)
            changed_at = time.time()
            await asyncio.to_thread(_wait_for_runtime, log, math.ceil(changed_at) + 8, 30)
            for w in workers[:2]:
                w.signal(signal.SIGKILL)
            killed_at = time.time()
            [new] = await asyncio.to_thread(procs.workers, url, 1, env=env)
            await asyncio.to_thread(_wait_for_runtime, log, math.ceil(killed_at) + 8, 30)
            assert await runtime_schedules.delete_schedule(steering, "tenant-1")
            deleted_at = time.time()
            await asyncio.sleep(max(0.0, deleted_at + 7 - time.time()))  # nothing may come
            await asyncio.to_thread(stop_all, [workers[2], new])
        runs = _runtime_runs(log)
        dedups = [(dedup, attempt) for _, _, attempt, _, dedup in runs]
        assert len(dedups) == len(set(dedups)), f"a slot was enqueued twice: {sorted(runs)}"
        assert all(dedup == f"tick:@tenant-1:{slot}" for slot, _, _, _, dedup in runs)
        old = [(s, pid, n) for s, pid, n, _, _ in runs if set_at + 5 <= s < changed_at]
        assert_each_slot_once(old, math.ceil(set_at + 5), math.floor(changed_at) - 1)
        assert all(t == 1 for s, _, _, t, _ in runs if s < changed_at)
        late = [(s, t) for s, _, _, t, _ in runs if s >= changed_at + 5]
        assert late, "the new version never ran"
        assert all(t == 2 and s % 2 == 0 for s, t in late), f"the old version ran: {late}"
        evens = range(math.ceil(changed_at + 5) + math.ceil(changed_at + 5) % 2, int(deleted_at), 2)
        ran = {s for s, _ in late}
        assert [s for s in evens if s not in ran] == [], "slots of the new version missing"
        assert not [s for s in ran if s > deleted_at + 5], "ran after delete"


async def overlapping_run(
    procs: Processes, url: str, tmp_path: Path, log: Path
) -> tuple[list[Process], list[tuple[float, float | None, str, int, int]]]:
    """Three ticking replicas of the recorder's ``overlapping`` (a 1-s schedule whose
    runs take 2.5 s, overlap="skip") on ``url``, and the one run going on once two
    ended: the workers and ``[run]`` as :func:`spans` gives it."""
    env = {"FM_SLOT_LOG": str(tmp_path / "slots.log"), "FM_OVERLAP_LOG": str(log)}
    workers = await asyncio.to_thread(procs.workers, url, 3, env=env)
    await asyncio.to_thread(wait_for_line, log, "end", 30, 2)
    deadline = time.monotonic() + 10
    while not (running := [r for r in spans(log) if r[1] is None]):  # between two runs
        assert time.monotonic() < deadline, spans(log)
        await asyncio.sleep(0.05)
    assert len(running) == 1, spans(log)
    return workers, running


def _ticked_unpaused(lines: Iterable[str]) -> set[int]:
    """The slots of ``steered`` that replicas logged as enqueued unpaused: seen resumed,
    or their state unreadable in time."""
    found: set[int] = set()
    for line in lines:
        resumed = re.search(r"steered: not paused any more; slot (\S+) is enqueued", line)
        if resumed is not None:
            found.add(int(datetime.fromisoformat(resumed[1]).timestamp()))
        unread = re.search(r"steered: could not read whether slot (\d+) is paused", line)
        if unread is not None:
            found.add(int(unread[1]))
    return found


def _steer_runs(path: Path) -> list[tuple[str, int, int, int, str]]:
    """``(job, slot, pid, attempt, dedup id)`` per line of the recorder's steer log."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        name, slot, pid, attempt, dedup = line.split()
        out.append((name, int(slot), int(pid), int(attempt), dedup))
    return out


def _wait_for_steered(path: Path, slot: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not any(n == "steered" and s >= slot for n, s, *_ in _steer_runs(path)):
        if time.monotonic() > deadline:
            raise AssertionError(f"slot {slot} of steered not run within {timeout:g}s")
        time.sleep(0.1)


def _runtime_runs(path: Path) -> list[tuple[int, int, int, int, str]]:
    """``(slot, pid, attempt, tenant, dedup id)`` per line of the recorder's runtime log."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        slot, pid, attempt, tenant, dedup = line.split()
        out.append((int(slot), int(pid), int(attempt), int(tenant), dedup))
    return out


def _wait_for_runtime(path: Path, slot: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not any(s >= slot for s, *_ in _runtime_runs(path)):
        if time.monotonic() > deadline:
            newest = max((s for s, *_ in _runtime_runs(path)), default=None)
            raise AssertionError(f"slot {slot} not run within {timeout:g}s (newest: {newest})")
        time.sleep(0.1)

"""What the fleet's workers are doing and have just done: the jobs running now, and the
latest settled deliveries, for lists by state.

Two kinds of record, each written by a worker at most once a :data:`FLUSH` while
something changed, never on a job's path:

* ``runs:{replica}`` (a memo, :mod:`.keys`): the runs of one replica going on, the
  :data:`MOST_RUNNING` oldest, kept for :data:`RUNS_TTL` seconds and rewritten every
  :data:`RENEW` while runs go on, so the runs of a replica that died drop out by
  themselves. ``{"v": 1, "at": ..., "total": n, "runs": [{job_id, job, attempt,
  started_at, slot}, ...]}``.
* ``finished:{n}`` and ``failed:{n}`` (state records, one of 16 each by replica):
  records of settled deliveries (:mod:`.settled`) of the replicas of that bucket, the
  failed attempts (retried or dead-lettered) apart so that a flood of successes does
  not push them out; :data:`MOST_FINISHED` a bucket (fewer where they do not fit) and
  none older than :data:`MAX_AGE`.

Both are validated as they are read; an entry that is not what a worker writes is left
out.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..ports.protocols import BrokerProtocol
from . import keys, settled
from .checks import is_count, is_name, is_unix_time
from .replicas import list_replicas
from .settled import FAILED, SettledRun
from .shared import shared

log = logging.getLogger("framework_m.worker")

FLUSH = 1.0  # seconds at least between two writes of one replica's records
RENEW = 5.0  # seconds between rewrites of an unchanged running list
RUNS_TTL = 15.0  # seconds a running list outlives its last write
MOST_RUNNING = 200  # runs listed a replica (the oldest; "total" counts them all)
MOST_FINISHED = 60  # settled deliveries kept a bucket (fewer where they do not fit)
MAX_AGE = 86_400.0  # seconds a settled delivery is kept


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A run going on, as its replica last wrote."""

    job_id: str
    job: str
    attempt: int
    started_at: float
    slot: int | None
    replica: str

    @property
    def running_for(self) -> float:
        """Seconds since it started, by this process's clock."""
        return max(0.0, time.time() - self.started_at)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "running_for": self.running_for}


# -- the worker's writes ---------------------------------------------------------------


async def put_running(broker: BrokerProtocol, replica: str, runs: Sequence[RunningJob]) -> None:
    """Replace ``replica``'s running list with ``runs`` (the oldest listed)."""
    oldest = sorted(runs, key=lambda r: r.started_at)[:MOST_RUNNING]
    entries = [
        {"job_id": r.job_id, "job": r.job, "attempt": r.attempt, "started_at": r.started_at,
         "slot": r.slot}
        for r in oldest
    ]  # fmt: skip
    value = {"v": settled.VERSION, "at": time.time(), "total": len(runs), "runs": entries}
    await shared(broker).send_memos([(keys.runs(replica), _dumps(value), RUNS_TTL)])


async def add_finished(broker: BrokerProtocol, replica: str, done: Sequence[SettledRun]) -> bool:
    """Merge ``done`` into the finished and failed records of ``replica``'s bucket;
    False when other writers won every round of one."""
    failed = [r for r in done if r.outcome in FAILED]
    ended = [r for r in done if r.outcome not in FAILED]
    wrote = True
    for key, runs in (
        (keys.failed_bucket(replica), failed),
        (keys.finished_bucket(replica), ended),
    ):
        if runs:
            merged = await settled.merge(broker, key, runs, most=MOST_FINISHED, max_age=MAX_AGE)
            wrote = merged and wrote
    return wrote


# -- the readers -----------------------------------------------------------------------


async def running_jobs(broker: BrokerProtocol) -> tuple[list[RunningJob], int]:
    """The runs going on across the live replicas, oldest first, and how many there are
    in all (a replica lists its :data:`MOST_RUNNING` oldest)."""
    replicas = await list_replicas(broker)
    store = shared(broker)
    found = await asyncio.gather(*(store.get_memo(keys.runs(r.id)) for r in replicas))
    runs: list[RunningJob] = []
    total = 0
    for replica, value in zip(replicas, found, strict=True):
        if value is None:
            continue
        listed, count = _decode_running(value, replica.id)
        runs.extend(listed)
        total += count
    return sorted(runs, key=lambda r: r.started_at), total


async def finished_jobs(broker: BrokerProtocol, *, failed: bool) -> list[SettledRun]:
    """The latest settled deliveries of the fleet, newest first: the failed attempts
    (retried or dead-lettered), or else the others."""
    names = keys.failed_buckets() if failed else keys.finished_buckets()
    found = await asyncio.gather(*(settled.read(broker, n, max_age=MAX_AGE) for n in names))
    return sorted((r for runs in found for r in runs), key=lambda r: -r.finished_at)


async def job_runs(broker: BrokerProtocol, job_id: str) -> list[SettledRun]:
    """The settled deliveries of ``job_id`` the records still hold, oldest first: its
    attempts, as far back as the records reach (the failed ones longest)."""
    failed, ended = await asyncio.gather(
        finished_jobs(broker, failed=True), finished_jobs(broker, failed=False)
    )
    found = [*failed, *ended]
    return sorted((r for r in found if r.job_id == job_id), key=lambda r: r.finished_at)


# -- encoding --------------------------------------------------------------------------


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _decode_running(value: bytes, replica: str) -> tuple[list[RunningJob], int]:
    data = settled.listing(value, keys.runs(replica))
    if data is None:
        return [], 0
    runs = [r for e in data["runs"] if (r := _running(e, replica)) is not None]
    total = data.get("total")
    return runs, total if is_count(total) and total >= len(runs) else len(runs)


def _running(entry: object, replica: str) -> RunningJob | None:
    if not isinstance(entry, dict):
        return None
    job_id, job, attempt = entry.get("job_id"), entry.get("job"), entry.get("attempt")
    started, slot = entry.get("started_at"), entry.get("slot")
    if not (
        is_name(job_id) and is_name(job) and is_count(attempt) and is_unix_time(started)
        and (slot is None or is_count(slot))
    ):  # fmt: skip
        return None
    return RunningJob(job_id, job, attempt, float(started), slot, replica)

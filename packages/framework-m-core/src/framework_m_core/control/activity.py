"""What the fleet's workers are doing and have just done: the jobs running now, and the
latest settled deliveries, for lists by state.

Two kinds of record, each written by a worker at most once a :data:`FLUSH` while
something changed, never on a job's path:

* ``runs:{replica}`` (a memo, :mod:`.keys`): the runs of one replica going on, the
  :data:`MOST_RUNNING` oldest, kept for :data:`RUNS_TTL` seconds and rewritten every
  :data:`RENEW` while runs go on, so the runs of a replica that died drop out by
  themselves. ``{"v": 1, "at": ..., "total": n, "runs": [{job_id, job, attempt,
  started_at, slot}, ...]}``.
* ``finished:{n}`` and ``failed:{n}`` (state records, one of 16 each by replica): the
  latest settled deliveries of the replicas of that bucket, the failed attempts
  (retried or dead-lettered) apart so that a flood of successes does not push them
  out; :data:`MOST_FINISHED` a bucket (fewer where they do not fit a state record) and
  none older than :data:`MAX_AGE`, merged in by compare-and-set.
  ``{"v": 1, "runs": [{job_id, job, replica, attempt, outcome, started_at, finished_at,
  error}, ...]}``.

Both are validated as they are read; an entry that is not what this module writes is
left out.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, cast

from ..ports.protocols import BrokerProtocol
from . import keys
from .checks import fitted_list, is_count, is_name, is_unix_time
from .history import OUTCOMES, Outcome
from .replicas import list_replicas
from .runtime_schedules import contention_pause
from .shared import shared

log = logging.getLogger("framework_m.worker")

VERSION = 1
FLUSH = 1.0  # seconds at least between two writes of one replica's records
RENEW = 5.0  # seconds between rewrites of an unchanged running list
RUNS_TTL = 15.0  # seconds a running list outlives its last write
MOST_RUNNING = 200  # runs listed a replica (the oldest; "total" counts them all)
MOST_FINISHED = 60  # settled deliveries kept a bucket (fewer where they do not fit)
MAX_AGE = 86_400.0  # seconds a settled delivery is kept
MAX_ERROR = 300
#: The outcomes of a failed attempt, kept in records of their own.
FAILED: frozenset[str] = frozenset({"retried", "dead_lettered"})
_ROUNDS = 10


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


@dataclass(frozen=True, slots=True)
class FinishedJob:
    """A settled delivery: how one attempt of a job ended."""

    job_id: str
    job: str
    replica: str
    attempt: int
    outcome: Outcome
    started_at: float | None  # None: settled without running
    finished_at: float
    error: str | None = None

    @property
    def duration(self) -> float | None:
        return None if self.started_at is None else max(0.0, self.finished_at - self.started_at)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "duration": self.duration}


# -- the worker's writes ---------------------------------------------------------------


async def put_running(broker: BrokerProtocol, replica: str, runs: Sequence[RunningJob]) -> None:
    """Replace ``replica``'s running list with ``runs`` (the oldest listed)."""
    oldest = sorted(runs, key=lambda r: r.started_at)[:MOST_RUNNING]
    entries = [
        {"job_id": r.job_id, "job": r.job, "attempt": r.attempt, "started_at": r.started_at,
         "slot": r.slot}
        for r in oldest
    ]  # fmt: skip
    value = {"v": VERSION, "at": time.time(), "total": len(runs), "runs": entries}
    await shared(broker).send_memos([(keys.runs(replica), _dumps(value), RUNS_TTL)])


async def add_finished(broker: BrokerProtocol, replica: str, done: Sequence[FinishedJob]) -> bool:
    """Merge ``done`` into the finished and failed buckets of ``replica``; False when
    other writers won every round of one."""
    failed = [r for r in done if r.outcome in FAILED]
    ended = [r for r in done if r.outcome not in FAILED]
    wrote = True
    for bucket, runs in (
        (keys.failed_bucket(replica), failed),
        (keys.finished_bucket(replica), ended),
    ):
        if runs:
            wrote = await _merge(broker, bucket, runs) and wrote
    return wrote


async def _merge(broker: BrokerProtocol, key: str, done: Sequence[FinishedJob]) -> bool:
    store = shared(broker)
    for attempt in range(_ROUNDS):
        await contention_pause(attempt)
        current = await store.read_state(key)
        kept = [] if current is None else _decode_finished(current.value, key)
        merged = _latest([*done, *kept], time.time())
        value = fitted_list({"v": VERSION}, "runs", [_finished_entry(r) for r in merged])
        version = None if current is None else current.version
        if await store.write_state(key, value, version=version) is not None:
            return True
    return False


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


async def finished_jobs(broker: BrokerProtocol, *, failed: bool) -> list[FinishedJob]:
    """The latest settled deliveries of the fleet, newest first: the failed attempts
    (retried or dead-lettered), or else the others."""
    store = shared(broker)
    names = keys.failed_buckets() if failed else keys.finished_buckets()
    found = await asyncio.gather(*(store.read_state(name) for name in names))
    runs: list[FinishedJob] = []
    for name, current in zip(names, found, strict=True):
        if current is not None:
            runs.extend(_decode_finished(current.value, name))
    now = time.time()
    return sorted(
        (r for r in runs if r.finished_at >= now - MAX_AGE),
        key=lambda r: r.finished_at,
        reverse=True,
    )


# -- encoding --------------------------------------------------------------------------


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _latest(runs: list[FinishedJob], now: float) -> list[FinishedJob]:
    fresh = [r for r in runs if r.finished_at >= now - MAX_AGE]
    return sorted(fresh, key=lambda r: r.finished_at, reverse=True)[:MOST_FINISHED]


def _finished_entry(run: FinishedJob) -> dict[str, object]:
    out = asdict(run)
    if run.error is not None:
        out["error"] = run.error[:MAX_ERROR]
    return out


def _object(value: bytes, key: str) -> dict[str, Any] | None:
    try:
        data = json.loads(value)
    except (ValueError, RecursionError):
        data = None
    if (
        not isinstance(data, dict)
        or data.get("v") != VERSION
        or not isinstance(data.get("runs"), list)
    ):
        log.warning("record %s is not what a worker writes: read as empty", key)
        return None
    return data


def _decode_running(value: bytes, replica: str) -> tuple[list[RunningJob], int]:
    data = _object(value, keys.runs(replica))
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


def _decode_finished(value: bytes, key: str) -> list[FinishedJob]:
    data = _object(value, key)
    if data is None:
        return []
    runs = [r for e in data["runs"] if (r := _finished(e)) is not None]
    if len(runs) < len(data["runs"]):
        log.warning("record %s: %d malformed entries left out", key, len(data["runs"]) - len(runs))
    return runs


def _finished(entry: object) -> FinishedJob | None:
    if not isinstance(entry, dict):
        return None
    job_id, job, replica = entry.get("job_id"), entry.get("job"), entry.get("replica")
    attempt, outcome = entry.get("attempt"), entry.get("outcome")
    started, finished, error = entry.get("started_at"), entry.get("finished_at"), entry.get("error")
    if not (
        is_name(job_id) and is_name(job) and is_name(replica) and is_count(attempt)
        and outcome in OUTCOMES and (started is None or is_unix_time(started))
        and is_unix_time(finished) and (error is None or isinstance(error, str))
    ):  # fmt: skip
        return None
    return FinishedJob(
        job_id, job, replica, attempt, cast(Outcome, outcome),
        None if started is None else float(started), float(finished),
        None if error is None else error[:MAX_ERROR],
    )  # fmt: skip

"""The last runs of each schedule: which slot, on which replica, how long, how it ended.

One state record a schedule, ``history:{schedule}`` (:mod:`.keys`), a JSON object
version 1::

    {"v": 1, "runs": [{"slot": 1700000000, "job_id": "...", "replica": "host:pid:ab12cd",
      "attempt": 1, "outcome": "succeeded", "started_at": ..., "finished_at": ...,
      "error": null}, ...]}

newest first, at most :data:`MOST` runs and none finished more than :data:`MAX_AGE`
seconds ago. The worker that settles a delivery of a ticked job (its code schedule's or
a runtime schedule's) adds it, by compare-and-set, after the settle and off the run's
path: only scheduled runs pay for it, and a history that cannot be written is logged and
never holds a job up. The record is validated as it is read; an entry that is not what
this module writes is left out.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal, cast, get_args

from ..ports.protocols import BrokerProtocol
from . import keys
from .checks import fitted_list, is_count, is_name, is_unix_time
from .runtime_schedules import contention_pause
from .shared import shared

log = logging.getLogger("framework_m.worker")

VERSION = 1
MOST = 50  # runs kept a schedule
MAX_AGE = 7 * 86_400.0  # seconds a run is kept after it finished
MAX_ERROR = 300  # characters of an error kept
_ROUNDS = 10

#: How a delivery of a ticked job ended. ``skipped``: its schedule's previous run still
#: went on (``overlap="skip"``); ``expired``: stored past its slot's grace (a missed
#: slot); ``retried``: the attempt failed and another follows; ``dead_lettered``: the
#: last attempt failed.
Outcome = Literal["succeeded", "retried", "dead_lettered", "skipped", "expired", "cancelled"]
OUTCOMES: frozenset[str] = frozenset(get_args(Outcome))


@dataclass(frozen=True, slots=True)
class ScheduleRun:
    """One settled delivery of a schedule's job."""

    slot: int | None  # unix seconds of the slot it ran for
    job_id: str
    replica: str  # the replica that settled it
    attempt: int
    outcome: Outcome
    started_at: float | None  # None: settled without running (skipped, expired)
    finished_at: float
    error: str | None = None

    @property
    def duration(self) -> float | None:
        """Seconds its handler ran; None when it did not run."""
        return None if self.started_at is None else max(0.0, self.finished_at - self.started_at)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "duration": self.duration}


async def record_run(broker: BrokerProtocol, schedule: str, run: ScheduleRun) -> bool:
    """Add ``run`` to ``schedule``'s history; False when other writers won every round."""
    key = keys.history(schedule)
    store = shared(broker)
    for attempt in range(_ROUNDS):
        await contention_pause(attempt)
        current = await store.read_state(key)
        runs = [] if current is None else _decode(current.value, key)
        runs = _kept([run, *runs], run.finished_at)
        value = fitted_list({"v": VERSION}, "runs", [_entry(r) for r in runs])
        version = None if current is None else current.version
        if await store.write_state(key, value, version=version) is not None:
            return True
    return False


async def schedule_history(broker: BrokerProtocol, schedule: str) -> list[ScheduleRun]:
    """``schedule``'s last runs, newest first (none when it has no history)."""
    key = keys.history(schedule)
    current = await shared(broker).read_state(key)
    return [] if current is None else _kept(_decode(current.value, key), time.time())


def _kept(runs: list[ScheduleRun], now: float) -> list[ScheduleRun]:
    fresh = [r for r in runs if r.finished_at >= now - MAX_AGE]
    return sorted(fresh, key=lambda r: r.finished_at, reverse=True)[:MOST]


def _entry(run: ScheduleRun) -> dict[str, object]:
    out = asdict(run)
    if run.error is not None:
        out["error"] = run.error[:MAX_ERROR]
    return out


def _decode(value: bytes, key: str) -> list[ScheduleRun]:
    try:
        data = json.loads(value)
    except (ValueError, RecursionError):
        data = None
    if (
        not isinstance(data, dict)
        or data.get("v") != VERSION
        or not isinstance(data.get("runs"), list)
    ):
        log.warning("state record %s is not a schedule history: read as empty", key)
        return []
    runs = [run for entry in data["runs"] if (run := _run(entry)) is not None]
    if len(runs) < len(data["runs"]):
        log.warning(
            "state record %s: %d malformed run(s) left out", key, len(data["runs"]) - len(runs)
        )
    return runs


def _run(entry: object) -> ScheduleRun | None:
    if not isinstance(entry, dict):
        return None
    slot, job_id, replica = entry.get("slot"), entry.get("job_id"), entry.get("replica")
    attempt, outcome = entry.get("attempt"), entry.get("outcome")
    started, finished, error = entry.get("started_at"), entry.get("finished_at"), entry.get("error")
    if not (
        (slot is None or is_count(slot))
        and is_name(job_id)
        and is_name(replica)
        and is_count(attempt)
        and outcome in OUTCOMES
        and (started is None or is_unix_time(started))
        and is_unix_time(finished)
        and (error is None or isinstance(error, str))
    ):
        return None
    return ScheduleRun(
        slot=slot,
        job_id=job_id,
        replica=replica,
        attempt=attempt,
        outcome=cast(Outcome, outcome),
        started_at=None if started is None else float(started),
        finished_at=float(finished),
        error=None if error is None else error[:MAX_ERROR],
    )

"""Settled deliveries: how one attempt of a job ended, and the bounded records that keep
the latest of them: a schedule's history (:mod:`~framework_m_core.control.history`),
the fleet's finished and failed lists (:mod:`~framework_m_core.control.activity`).

A record is a state record, a JSON object version 1, its runs newest first::

    {"v": 1, "runs": [{"job_id": "...", "job": "report", "replica": "host:pid:ab12cd",
      "attempt": 1, "outcome": "succeeded", "started_at": ..., "finished_at": ...,
      "error": null, "slot": 1700000000 | null}, ...]}

at most a given number of runs that fit a state record, none older than a given age,
merged in by compare-and-set. It is validated as it is read; an entry that is not what
this module writes is left out, with a warning.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, cast, get_args

from ..ports.protocols import BrokerProtocol
from .checks import fitted_list, is_count, is_name, is_unix_time
from .runtime_schedules import contention_pause
from .shared import shared

log = logging.getLogger("framework_m.worker")

VERSION = 1
MAX_ERROR = 300  # characters of an error kept
_ROUNDS = 10

#: How a delivery ended. ``retried``: the attempt failed and another follows;
#: ``dead_lettered``: the last one failed; ``skipped``: its schedule's previous run
#: still went on (``overlap="skip"``); ``expired``: stored past its slot's grace (a
#: missed slot); ``snoozed``: the handler asked to run again later (a copy is stored).
Outcome = Literal[
    "succeeded", "retried", "dead_lettered", "skipped", "expired", "cancelled", "snoozed"
]
OUTCOMES: frozenset[str] = frozenset(get_args(Outcome))
#: The outcomes of a failed attempt.
FAILED: frozenset[str] = frozenset({"retried", "dead_lettered"})


@dataclass(frozen=True, slots=True)
class SettledRun:
    """One settled delivery of a job."""

    job_id: str
    job: str
    replica: str  # the replica that settled it (its id in the roll)
    attempt: int
    outcome: Outcome
    started_at: float | None  # None: settled without running (skipped, expired)
    finished_at: float
    error: str | None = None
    slot: int | None = None  # unix seconds of the schedule slot, ticked jobs only

    @property
    def duration(self) -> float | None:
        """Seconds its handler ran; None when it did not run."""
        return None if self.started_at is None else max(0.0, self.finished_at - self.started_at)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "duration": self.duration}


async def merge(
    broker: BrokerProtocol, key: str, runs: Sequence[SettledRun], *, most: int, max_age: float
) -> bool:
    """Merge ``runs`` into record ``key``, keeping its latest ``most`` (fewer where they
    do not fit) finished within ``max_age`` seconds; False when other writers won every
    round."""
    store = shared(broker)
    for attempt in range(_ROUNDS):
        await contention_pause(attempt)
        current = await store.read_state(key)
        kept = [] if current is None else decode(current.value, key)
        latest = _latest([*runs, *kept], most, max_age)
        value = fitted_list({"v": VERSION}, "runs", [_entry(r) for r in latest])
        version = None if current is None else current.version
        if await store.write_state(key, value, version=version) is not None:
            return True
    return False


async def read(broker: BrokerProtocol, key: str, *, max_age: float) -> list[SettledRun]:
    """The runs of record ``key`` finished within ``max_age`` seconds, newest first."""
    current = await shared(broker).read_state(key)
    return [] if current is None else _latest(decode(current.value, key), None, max_age)


def _latest(runs: list[SettledRun], most: int | None, max_age: float) -> list[SettledRun]:
    since = time.time() - max_age
    fresh = sorted((r for r in runs if r.finished_at >= since), key=lambda r: -r.finished_at)
    return fresh if most is None else fresh[:most]


def _entry(run: SettledRun) -> dict[str, object]:
    out: dict[str, object] = asdict(run)
    if run.error is not None:
        out["error"] = run.error[:MAX_ERROR]
    return out


def decode(value: bytes, key: str) -> list[SettledRun]:
    """The runs of record ``key`` holding ``value``, as far as they are valid."""
    data = listing(value, key)
    if data is None:
        return []
    runs = [run for entry in data["runs"] if (run := _run(entry)) is not None]
    if len(runs) < len(data["runs"]):
        log.warning("record %s: %d malformed entries left out", key, len(data["runs"]) - len(runs))
    return runs


def listing(value: bytes, key: str) -> dict[str, Any] | None:
    """The object a record of runs holds (``"v": 1`` and a list ``"runs"``); None, with
    a warning, when ``value`` is not one."""
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


def _run(entry: object) -> SettledRun | None:
    if not isinstance(entry, dict):
        return None
    job_id, job, replica = entry.get("job_id"), entry.get("job"), entry.get("replica")
    attempt, outcome, slot = entry.get("attempt"), entry.get("outcome"), entry.get("slot")
    started, finished, error = entry.get("started_at"), entry.get("finished_at"), entry.get("error")
    if not (
        is_name(job_id) and is_name(job) and is_name(replica) and is_count(attempt)
        and outcome in OUTCOMES and (started is None or is_unix_time(started))
        and is_unix_time(finished) and (error is None or isinstance(error, str))
        and (slot is None or is_count(slot))
    ):  # fmt: skip
        return None
    return SettledRun(
        job_id, job, replica, attempt, cast(Outcome, outcome),
        None if started is None else float(started), float(finished),
        None if error is None else error[:MAX_ERROR], slot,
    )  # fmt: skip

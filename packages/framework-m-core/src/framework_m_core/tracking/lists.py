"""Jobs by state, as operators list them (``m jobs list`` and ``m console``).

``waiting`` (due now), ``delayed`` (enqueued for later) and ``retrying`` (a failed
attempt waiting out its delay) come from the broker's own record of what it holds
(``waiting()``, on brokers that can read it without taking it); ``running``,
``finished`` and ``failed`` from the records the workers keep
(:mod:`~framework_m_core.control.activity`): the runs going on with their replica and
how long, the latest settled deliveries, the latest failed attempts. ``dead`` comes
from the broker's dead letters. Each list is bounded by what those records keep, the
first three by the :data:`WAITING_READ` jobs first in line, of which a job cancelled
already is left out (the broker holds it until a worker takes it and drops it).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

from ..control import activity, jobs, keys, steering
from ..control.shared import shared
from ..errors import ConfigurationError, MessageDecodeError
from ..ports.capabilities import Capability
from ..ports.messages import decode_message
from ..ports.protocols import BrokerProtocol
from ..ports.records import Waiting
from .deadletters import described

State = Literal["waiting", "delayed", "retrying", "running", "finished", "failed", "dead"]
STATES: tuple[str, ...] = get_args(State)
DEAD_READ = 10_000  # the latest dead letters a listing looks through
WAITING_READ = 1_000  # the jobs first in line a listing of waiting ones looks through
_HELD = ("waiting", "delayed", "retrying")


@dataclass(frozen=True, slots=True)
class HeldJob:
    """A job the broker holds: due now (``due_at`` None), delayed, or a retry."""

    job_id: str  # "-" for a message that is not a job's
    job: str
    attempt: int  # the attempt it will be delivered as
    due_at: float | None
    enqueued_at: float | None


@dataclass(frozen=True, slots=True)
class DeadJob:
    """A dead letter, as the list of dead jobs shows it."""

    job_id: str
    job: str
    attempts: int
    dead_lettered_at: float
    reason: str
    key: str


def validate_state(value: object) -> State:
    if value not in STATES:
        raise ConfigurationError(f"state must be one of {', '.join(STATES)}, got {value!r}")
    return value  # type: ignore[return-value]


async def jobs_in_state(
    broker: BrokerProtocol, state: State, job: str | None = None
) -> tuple[list[dict[str, Any]], int]:
    """The jobs in ``state`` (of job ``job`` only, when given) as JSON-ready dicts:
    running oldest first, the others newest first; and how many there are in all (a
    replica lists its oldest runs, and counts the rest)."""
    if state in _HELD:
        return await _held(broker, state, job)
    if Capability.STORE not in broker.capabilities and state != "dead":
        raise ConfigurationError(
            f"{broker.display_url} keeps no shared state: no list of {state} jobs"
        )
    if state == "running":
        runs, total = await activity.running_jobs(broker)
        if job is not None:
            runs = [r for r in runs if r.job == job]
            total = len(runs)
        return [r.as_dict() for r in runs], total
    if state in ("finished", "failed"):
        done = await activity.finished_jobs(broker, failed=state == "failed")
        items = [r.as_dict() for r in done if job is None or r.job == job]
        return items, len(items)
    if Capability.DEAD_LETTER_INSPECTION not in broker.capabilities:
        raise ConfigurationError(f"{broker.display_url} cannot list dead letters")
    letters = sorted(
        map(described, await broker.dead_letters(DEAD_READ)),
        key=lambda d: -d.letter.dead_lettered_at,
    )
    items = [
        asdict(DeadJob(d.job_id, d.job, d.letter.attempts, d.letter.dead_lettered_at,
                       d.letter.reason, d.key))
        for d in letters
        if job is None or d.job == job
    ]  # fmt: skip
    return items, len(items)


async def _held(
    broker: BrokerProtocol, state: State, job: str | None
) -> tuple[list[dict[str, Any]], int]:
    """The jobs the broker holds in ``state``, first in line first."""
    items = [item for kind, item in await _held_jobs(broker, job) if kind == state]
    return items, len(items)


async def held_ids(broker: BrokerProtocol, job: str) -> list[str]:
    """The ids of the jobs of ``job`` the broker holds (waiting, delayed or retrying)
    among the :data:`WAITING_READ` first in line, none cancelled already. A name no
    replica announced is refused (:class:`~.errors.NotFoundError`): a typo finds
    nothing and says so."""
    if Capability.STORE not in broker.capabilities:
        raise ConfigurationError(f"{broker.display_url} keeps no shared state: no cancels")
    await steering.check_job(broker, job)
    return [item["job_id"] for _, item in await _held_jobs(broker, job) if item["job_id"] != "-"]


async def cancel_held(broker: BrokerProtocol, job: str) -> int:
    """Cancel the jobs :func:`held_ids` finds, as :func:`~.control.jobs.cancel_job`
    would; how many will now not run. Each is dropped by the worker that takes it."""
    return sum(await jobs.cancel_jobs(broker, await held_ids(broker, job)))


async def _held_jobs(broker: BrokerProtocol, job: str | None) -> list[tuple[State, dict[str, Any]]]:
    """The jobs the broker holds (of ``job``, when given), each with its state, first in
    line first; one cancelled already is left out (it will not run)."""
    if Capability.WAITING_INSPECTION not in broker.capabilities:
        raise ConfigurationError(
            f"{broker.display_url} cannot list the jobs it holds without taking them: "
            "its queue's counts are in m status"
        )
    found: list[tuple[State, dict[str, Any]]] = []
    for held in await broker.waiting(WAITING_READ):
        try:
            message = decode_message(held.body)
        except MessageDecodeError:
            name, job_id, enqueued_at = "-", "-", None
        else:
            name, job_id, enqueued_at = message.job_name, message.id, message.enqueued_at
        if job is None or name == job:
            item = HeldJob(job_id, name, held.attempt, held.due_at, enqueued_at)
            found.append((_kind(held), asdict(item)))
    if Capability.STORE not in broker.capabilities or not found:
        return found
    ids = [item["job_id"] for _, item in found if item["job_id"] != "-"]
    marks = await shared(broker).get_memos([keys.cancel_mark(i) for i in ids])
    cancelled = {i for i, mark in zip(ids, marks, strict=True) if mark is not None}
    return [(kind, item) for kind, item in found if item["job_id"] not in cancelled]


@dataclass(frozen=True, slots=True)
class OldestWaiting:
    """The job first in line of those due now, and how long ago it was enqueued."""

    job_id: str
    job: str
    enqueued_at: float | None
    age: float | None  # seconds, by this process's clock against the enqueuer's


async def oldest_waiting(broker: BrokerProtocol) -> OldestWaiting | None:
    """The job first in line of those due now: None when none waits, or when the broker
    cannot list what it holds."""
    if Capability.WAITING_INSPECTION not in broker.capabilities:
        return None
    first = list(await broker.waiting(1))
    if not first or first[0].due_at is not None:
        return None
    try:
        message = decode_message(first[0].body)
    except MessageDecodeError:
        return None
    age = None if message.enqueued_at is None else max(0.0, time.time() - message.enqueued_at)
    return OldestWaiting(message.id, message.job_name, message.enqueued_at, age)


def _kind(held: Waiting) -> State:
    """Waiting when it is due, else retrying (an attempt after the first) or delayed."""
    if held.due_at is None:
        return "waiting"
    return "retrying" if held.attempt > 1 else "delayed"

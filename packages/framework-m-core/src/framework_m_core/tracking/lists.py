"""Jobs by state, as operators list them (``m jobs list`` and ``m console``).

``waiting`` (due now), ``delayed`` (enqueued for later) and ``retrying`` (a failed
attempt waiting out its delay) come from the broker's own record of what it holds
(``waiting()``, on brokers that can read it without taking it); ``running``,
``finished`` and ``failed`` from the records the workers keep
(:mod:`~framework_m_core.control.activity`): the runs going on with their replica and
how long, the latest settled deliveries, the latest failed attempts. ``dead`` comes
from the broker's dead letters. Each list is bounded by what those records keep, the
first three by the :data:`WAITING_READ` jobs first in line.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from ..control import activity
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
        {
            "job_id": d.job_id,
            "job": d.job,
            "attempts": d.letter.attempts,
            "dead_lettered_at": d.letter.dead_lettered_at,
            "reason": d.letter.reason,
            "key": d.key,
        }
        for d in letters
        if job is None or d.job == job
    ]
    return items, len(items)


async def _held(
    broker: BrokerProtocol, state: State, job: str | None
) -> tuple[list[dict[str, Any]], int]:
    """The jobs the broker holds in ``state``, first in line first."""
    if Capability.WAITING_INSPECTION not in broker.capabilities:
        raise ConfigurationError(
            f"{broker.display_url} cannot list the jobs it holds without taking them: "
            "its queue's counts are in m status"
        )
    items = []
    for held in await broker.waiting(WAITING_READ):
        if _kind(held) != state:
            continue
        try:
            message = decode_message(held.body)
        except MessageDecodeError:
            name, job_id, enqueued_at = "-", "-", None
        else:
            name, job_id, enqueued_at = message.job_name, message.id, message.enqueued_at
        if job is None or name == job:
            items.append(
                {"job_id": job_id, "job": name, "attempt": held.attempt,
                 "due_at": held.due_at, "enqueued_at": enqueued_at}
            )  # fmt: skip
    return items, len(items)


def _kind(held: Waiting) -> State:
    """Waiting when it is due, else retrying (an attempt after the first) or delayed."""
    if held.due_at is None:
        return "waiting"
    return "retrying" if held.attempt > 1 else "delayed"

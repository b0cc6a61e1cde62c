"""The console's answers as types: each is served as its ``as_dict()`` and described in
the OpenAPI document by :func:`~.schemas.schema_of` its class, so the two cannot drift."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from ..control import steering
from ..control.settled import SettledRun
from ..tracking.deadletters import Described

#: Bytes of a dead letter's body an answer shows.
BODY_SHOWN = 4096


@dataclass(frozen=True, slots=True)
class Pause:
    """Whether a schedule is paused (None: the broker keeps no state), until when, why
    and by whom, and the latest slot enqueued."""

    paused: bool | None
    paused_until: float | None
    reason: str | None
    paused_by: str | None
    last_slot: int | None

    @staticmethod
    def fields_of(state: steering.ScheduleState | None, now: float) -> dict[str, Any]:
        """The pause fields of ``state`` at ``now`` (a pause past its end is over)."""
        if state is None:
            return {k: None for k in ("paused", "paused_until", "reason", "paused_by", "last_slot")}
        ended = state.paused_until is not None and state.paused_until <= now
        return {
            "paused": state.paused and not ended,
            "paused_until": state.paused_until,
            "reason": state.reason,
            "paused_by": state.paused_by,
            "last_slot": state.latest_slot,
        }


@dataclass(frozen=True, slots=True)
class PausedSchedule(Pause):
    """A schedule's pause after a pause or resume."""

    name: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ScheduleRow(Pause):
    """A schedule as the console lists it: from code or runtime, its next slot, its
    pause, the runs going on (where leased) and its last run."""

    name: str
    job: str
    source: Literal["code", "runtime"]
    schedule: str
    zone: str | None
    kwargs: dict[str, Any]
    next_slot: int
    overlap: str | None
    catchup_window: float | None
    known_job: bool  # the console's app has the job (or the console has no app)
    running: list[str] | None
    last_run: SettledRun | None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["last_run"] = None if self.last_run is None else self.last_run.as_dict()
        return out


@dataclass(frozen=True, slots=True)
class DeadLetterRow:
    """A dead letter as the console lists it: its body shown up to :data:`BODY_SHOWN`
    bytes (``body_cut`` when longer)."""

    key: str
    job: str
    job_id: str
    reason: str
    attempts: int
    dead_lettered_at: float
    size: int
    body: str
    body_cut: bool

    @classmethod
    def of(cls, d: Described) -> DeadLetterRow:
        body = d.letter.body
        return cls(
            d.key,
            d.job,
            d.job_id,
            d.letter.reason,
            d.letter.attempts,
            d.letter.dead_lettered_at,
            len(body),
            body[:BODY_SHOWN].decode("utf-8", "replace"),
            len(body) > BODY_SHOWN,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

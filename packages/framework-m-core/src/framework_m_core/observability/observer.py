"""What the ticker and the worker report as they go, for metrics; the default ignores it.

Outcomes are a fixed set and job names come from the app (``unknown`` for a
message naming no registered job), so whatever records them stays bounded.
"""

from __future__ import annotations

from typing import Literal

TickOutcome = Literal[
    "enqueued", "caught_up", "duplicate", "skipped", "failed", "unknown", "clock_held", "paused"
]
JobOutcome = Literal[
    "succeeded",
    "retried",
    "dead_lettered",
    "released",
    "expired",
    "skipped",
    "cancelled",
    "already_finished",
    "lost",
    "snoozed",
]
BrokerOperation = Literal["publish", "receive", "settle", "stats", "lease", "state", "memo"]
UNKNOWN_JOB = "unknown"


class Observer:
    """Receives events; subclasses record them. Every method must return quickly and
    never raise."""

    def tick(self, job: str, outcome: TickOutcome, slot: int, count: int = 1) -> None:
        """``count`` slots of ``job`` from ``slot`` on ended as ``outcome``."""

    def next_slot(self, job: str, slot: int | None) -> None:
        """This replica's ticker waits for ``slot`` of ``job`` next (None: it ticks
        ``job`` no more)."""

    def job_started(self, job: str, enqueued_at: float, scheduled_at: int | None) -> None:
        """A handler of ``job`` starts now."""

    def job_triggered(self, job: str) -> None:
        """A run of ``job`` an operator triggered (``m schedules trigger``) starts its
        first attempt now; :meth:`job_started` is called for it too."""

    def job_finished(self, job: str, outcome: JobOutcome, duration: float | None) -> None:
        """A delivery of ``job`` was settled as ``outcome``; ``duration`` if a handler ran."""

    def running(self, delta: int) -> None:
        """The number of handlers running changed by ``delta``."""

    def waiting(self, job: str, delta: int) -> None:
        """The number of runs of ``job`` waiting (for a limit's place, the schedule's
        running run under ``buffer_one``, or, delivered again, their own run going on in
        this process) changed by ``delta``."""

    def rate_waiting(self, job: str, delta: int) -> None:
        """The number of runs of ``job`` waiting for a start under its ``rate_limit``
        changed by ``delta`` (they count in :meth:`waiting` too)."""

    def loop_lag(self, seconds: float) -> None:
        """The event loop woke ``seconds`` later than asked, a few times a second."""

    def loop_stalled(self) -> None:
        """The event loop stayed blocked longer than the stall threshold (once a stall);
        called from the watchdog's thread."""

    def broker_connected(self, up: bool) -> None:
        """The broker answered (``up``) or stopped answering; called on each change."""

    def broker_error(self, operation: BrokerOperation) -> None:
        """A call to the broker failed (it may be retried)."""

    def outbox_seen(self, rows: int, oldest: float | None, failing: int) -> None:
        """The outbox relay counted the rows waiting in its table: ``oldest`` is the age
        in seconds of the oldest (None: none waits), ``failing`` how many of them a
        publish failed for."""

    def outbox_relayed(self, count: int) -> None:
        """The outbox relay published ``count`` rows (the broker stored or deduplicated
        them) and deleted them."""

    def outbox_failed(self, count: int) -> None:
        """Publishing ``count`` outbox rows failed; they stay and are tried again."""

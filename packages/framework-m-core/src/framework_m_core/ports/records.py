"""The records the ports exchange: deliveries, dead letters, counts, results.

:mod:`framework_m_core.ports` exports them beside :class:`~.base.BaseBroker`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class BatchJob(NamedTuple):
    """One job of an :meth:`~.protocols.JobQueueProtocol.enqueue_many` batch."""

    job_name: str
    kwargs: Mapping[str, Any] = {}
    deduplication_id: str | None = None


class EnqueueMemo(NamedTuple):
    """A memo an enqueue creates with the job it stores (its status, its slot's job)."""

    key: str
    value: bytes
    ttl: float  # seconds


class PublishResult(NamedTuple):
    """What a publish did: the job id stored under, and whether it was a duplicate."""

    job_id: str
    duplicate: bool = False


@dataclass(slots=True)
class Delivery:
    """One reserved message handed to a consumer."""

    body: bytes
    attempt: int  # 1 for the first delivery
    handle: Any = field(default=None, repr=False)  # adapter-private token
    stored_at: float | None = None  # when the broker stored the message, by its clock, if known
    # Where the broker cannot say when it stored the message: a time it had stored it by
    # (the first delivery's arrival, by this process's clock).
    stored_by: float | None = None
    # The earliest ``time.monotonic()`` at which the broker may have started this
    # reservation's clock (the request it answers was sent then); None: when received.
    # A process frozen between the broker's send and the arrival holds a reservation
    # older than it looks: the worker checks it before the handler starts.
    reserved_since: float | None = None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message that will not be delivered again, with why."""

    body: bytes
    reason: str
    attempts: int
    dead_lettered_at: float
    #: The adapter's own name for it (a stream sequence, an entry id), for removal.
    ref: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Waiting:
    """A message the broker holds and has handed out to no consumer."""

    body: bytes
    attempt: int  # the attempt it will be delivered as: 1 for one never delivered
    due_at: float | None  # unix seconds it is held until (a delay, a retry); None: due


@dataclass(frozen=True, slots=True)
class QueueStats:
    """What a queue holds now, by the broker's own numbers; None where it cannot tell.

    ``ready`` messages wait for a consumer (on brokers that deliver ahead, those a
    consumer prefetched are not among them); ``reserved`` ones were delivered and not
    settled; ``scheduled`` ones wait for a due time, held apart from both: jobs
    enqueued for later and, where the broker holds them so, retries waiting out their
    delay; ``consumers`` are the consumers the broker knows attached.

    Of ``scheduled``, ``delayed`` are the jobs enqueued for later and ``retries`` the
    retries, each None where the broker cannot tell them apart. Where ``retries`` is
    None, a broker that counts ``delayed`` (or no ``scheduled`` at all) keeps retries as
    reserved, and ``reserved`` counts them; one that counts neither (RabbitMQ) has them
    in ``scheduled`` with the delayed jobs.
    """

    ready: int | None = None
    reserved: int | None = None
    scheduled: int | None = None
    dead_letters: int | None = None
    consumers: int | None = None
    delayed: int | None = None
    retries: int | None = None

    @property
    def retries_in_reserved(self) -> bool:
        """Whether ``reserved`` counts the retries waiting out their delay."""
        return self.retries is None and (self.scheduled is None or self.delayed is not None)


@dataclass(slots=True)
class BrokerStats:
    """Counters of one broker instance."""

    enqueued: int = 0
    duplicates: int = 0

"""The ports: the one declaration of every method an adapter implements, with its contract.

``JobQueueProtocol`` is all an application needs to enqueue work. A broker
adapter implements :class:`BrokerProtocol`: the queue, the consuming side the
worker runs on, schema sync, and its lifecycle. Each docstring states the
behaviour, the errors and the idempotence that the worker and the ticker rely
on; ``framework_m_core.testing`` holds the contract suite with a test for each
sentence. Promises a broker may be unable to keep are marked *optional*: the
adapter declares the :class:`~.capabilities.Capability` it keeps.

Adapters usually subclass :class:`~.base.BaseBroker`, which implements the
shared half (validation, encoding, counting, the schema-sync template, the
connected guard) and leaves the abstract methods below.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

if TYPE_CHECKING:
    from .capabilities import Capability
    from .messages import JobMessage
    from .records import (
        BatchJob,
        BrokerStats,
        DeadLetter,
        Delivery,
        PublishResult,
        QueueStats,
        Waiting,
    )
    from .schema import SchemaPlan
    from .store import StoreProtocol


@runtime_checkable
class JobQueueProtocol(Protocol):
    """Where applications put jobs."""

    @abstractmethod
    async def enqueue(
        self, job_name: str, /, deduplication_id: str | None = None, **kwargs: Any
    ) -> str:
        """Enqueue ``job_name`` to run with ``kwargs`` and return its job id.

        The id is a non-empty string, different for every stored job. ``kwargs``
        must be JSON-serializable, nested at most ``MAX_NESTING`` levels, and
        ``job_name`` and ``deduplication_id`` valid (see :mod:`~.messages`); the
        encoded job must fit in what the broker carries. Otherwise
        :class:`~.errors.InvalidJobError` is raised and nothing is sent.

        With a ``deduplication_id``, every enqueue with the same id inside the
        broker's dedup window after the first one is a duplicate: it stores
        nothing, returns normally with the *original* job's id, and is counted
        (``stats.duplicates``) and logged at debug level. A duplicate is never an
        error. This holds between any number of connections and processes
        enqueueing at once. Distinct ids are never merged, however alike they
        look. After the window has passed, the same id stores a new job.

        Raises :class:`~.errors.BrokerError` (never a client library's own
        exception) when the broker cannot be reached or refuses the job; retrying
        with the same ``deduplication_id`` is then safe.
        """

    async def enqueue_many(self, jobs: Iterable[BatchJob]) -> list[str]:
        """Enqueue each :class:`~.records.BatchJob` of ``jobs``; return their ids, in order.

        Each job is an :meth:`enqueue`: the same validation, and a duplicate (of an
        earlier job, or of one before it in the batch) gets the original's id.
        Every job is validated before any is sent: one invalid job raises
        :class:`~.errors.InvalidJobError` and sends nothing. Adapters send the batch
        in fewer round trips than one by one where the broker allows. On
        :class:`~.errors.BrokerError` some jobs may be stored already: sending the
        batch again is safe for the jobs that carry a ``deduplication_id``.
        This default enqueues them one after another.
        """
        return [
            await self.enqueue(job.job_name, job.deduplication_id, **job.kwargs) for job in jobs
        ]

    async def enqueue_at(
        self,
        when: datetime | float,
        job_name: str,
        /,
        deduplication_id: str | None = None,
        **kwargs: Any,
    ) -> str:
        """Enqueue ``job_name`` to run no sooner than ``when`` (an aware datetime or unix
        seconds); return its job id.

        Like :meth:`enqueue` in every other way: validation, and a duplicate inside the
        window (counted from this call) returns the original's id. The broker holds the
        job until it is due, across a restart where it persists its queue; a ``when``
        that has passed enqueues it at once. A naive datetime, or a time that is not
        a finite unix time, raises :class:`~.errors.InvalidJobError`. *Optional*
        (:attr:`~.Capability.DELAYED_ENQUEUE`): without it this raises
        :class:`~.errors.BrokerError` and sends nothing.
        """
        from ..errors import BrokerError

        raise BrokerError(f"{type(self).__name__} cannot hold a job until it is due")

    async def enqueue_in(
        self,
        delay: timedelta | float,
        job_name: str,
        /,
        deduplication_id: str | None = None,
        **kwargs: Any,
    ) -> str:
        """:meth:`enqueue_at` ``delay`` (seconds, or a timedelta; not negative) from now."""
        from .messages import delay_seconds

        when = time.time() + delay_seconds(delay)
        return await self.enqueue_at(when, job_name, deduplication_id, **kwargs)


@runtime_checkable
class ConsumerProtocol(Protocol):
    """The consuming side the worker runtime needs. Delivery is at-least-once.

    A delivery is *reserved* for the consumer that received it until it is
    settled (acked, retried, released or dead-lettered) or its reservation
    expires: ``visibility_timeout`` seconds after it was received or last
    extended, or when the consumer's connection closes.

    Settling is idempotent: calling ``ack``, ``retry``, ``release`` or
    ``dead_letter`` again for a delivery already settled (say, after a reply was
    lost) changes nothing and returns normally; the worker retries a settle call
    that failed. A settle call for a delivery whose reservation expired never
    affects the copy delivered since to someone else: it raises
    :class:`~.errors.DeliveryLostError` and the broker's redelivery stands. That
    error also means the reservation ended with its connection. Any other
    :class:`~.errors.BrokerError` means "try the call again".
    """

    @abstractmethod
    async def receive(self, max_messages: int, timeout: float) -> Sequence[Delivery]:
        """Reserve and return up to ``max_messages`` deliveries, waiting at most ``timeout`` s.

        Never returns more than ``max_messages``. Returns as soon as at least one
        delivery is available (the contract suite wants a median under 0.1 s on an idle
        queue), without waiting to fill the batch; returns an
        empty sequence when none arrived within ``timeout``. A reserved delivery
        is not handed to any other consumer until its reservation ends; after it
        expires the broker delivers the message again with ``attempt`` one
        higher. The first delivery of a message has ``attempt`` 1. Bodies are
        returned exactly as stored, whatever they contain: decoding and
        validating them is the worker's job.
        """

    @abstractmethod
    async def ack(self, delivery: Delivery) -> None:
        """Remove a finished delivery for good; it is never delivered again.

        Called only after its handler succeeded. Idempotent (see the class docstring).
        """

    @abstractmethod
    async def retry(self, delivery: Delivery, delay: float) -> None:
        """Deliver the message again, no sooner than ``delay`` s from now, with ``attempt`` + 1.

        The delivery is settled: the message is not reserved while it waits, and
        any consumer may receive it once due. Idempotent: a repeated call leaves
        one copy of the message.
        """

    @abstractmethod
    async def release(self, delivery: Delivery) -> None:
        """Hand an unfinished delivery back (worker shutting down) for prompt redelivery.

        The message is available to every consumer at once, not after the
        visibility timeout. A release is not a failure: *optional*
        (:attr:`~.Capability.UNCOUNTED_RELEASE`), the next delivery keeps the
        same ``attempt``; brokers that count every delivery add one.
        """

    @abstractmethod
    async def extend(self, delivery: Delivery) -> None:
        """Restart the delivery's visibility timeout: its job is still running.

        While it is extended more often than every ``visibility_timeout``
        seconds, no other consumer receives the message.
        """

    def watch_losses(self, lost: Callable[[Sequence[Any], str], None] | None) -> None:
        """Have ``lost(handles, why)`` called, in the event loop, the moment the adapter
        learns that deliveries it handed out (their :attr:`Delivery.handle`) are no
        longer reserved for this consumer: the channel or connection they came on is
        gone, and the broker delivers them again. None stops it.

        *Optional*: an adapter that learns it only when asked (an :meth:`extend`
        raising :class:`~.errors.DeliveryLostError`) keeps this default, which calls
        nothing. It is never called for deliveries settled, nor on ``close()``.
        """
        return None

    @abstractmethod
    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        """Move the message to the dead-letter place with ``reason``; it is settled.

        The body is kept byte for byte, with ``reason``, the delivery's
        ``attempt`` and the time. A long ``reason`` may be shortened to what the
        broker stores; a body the broker cannot carry together with them (a raw
        message near its size limit) is left out, and the reason says so.
        Afterwards the message is never delivered from the work queue again.
        Idempotent: a repeated call stores one dead letter.
        """

    @abstractmethod
    async def dead_letters(self, limit: int = 100) -> Sequence[DeadLetter]:
        """The ``limit`` most recent dead letters, oldest first; none when ``limit`` < 1.

        Reading changes nothing: the same call again returns the same letters.
        *Optional* (:attr:`~.Capability.DEAD_LETTER_INSPECTION`): a broker that
        cannot read its dead letters back returns an empty sequence.
        """

    async def waiting(self, limit: int = 100) -> Sequence[Waiting]:
        """Up to ``limit`` messages the broker holds and has handed out to no consumer:
        those due now first, in the order it hands them out, then those held until a
        time (jobs enqueued for later, retries waiting out their delay) by that time.
        Each says the attempt it will be delivered as and when it is due (None: now).
        Reading changes nothing; none when ``limit`` < 1.

        *Optional* (:attr:`~.Capability.WAITING_INSPECTION`): a broker that cannot read
        them without taking them returns an empty sequence.
        """
        return []

    async def remove_dead_letters(self, letters: Sequence[DeadLetter]) -> int:
        """Delete ``letters`` (as :meth:`dead_letters` returned them) from the dead-letter
        place; return how many were still there. Idempotent: a letter already gone
        counts 0. Letters not named stay, in their order.

        *Optional* (:attr:`~.Capability.DEAD_LETTER_REMOVAL`): without it this raises
        :class:`~.errors.BrokerError`. ``m dead-letters requeue`` and ``purge`` use it.
        """
        from ..errors import BrokerError

        raise BrokerError(f"{type(self).__name__} cannot remove dead letters")

    @abstractmethod
    async def requeue(self, body: bytes) -> None:
        """Put ``body`` on the work queue as it is, as a new message with ``attempt`` 1.

        How a dead letter is run again once its cause is fixed, and how repair
        tools put back what they took out. Nothing is validated or deduplicated:
        bytes that are not a job reach the worker, which dead-letters them with
        the reason.
        """


@runtime_checkable
class SchemaSyncProtocol(Protocol):
    """Keeps the broker's streams, queues and groups in line with what the code needs."""

    @abstractmethod
    async def plan_schema(self) -> SchemaPlan:
        """Inspect the broker and say what differs from the desired layout. Changes nothing.

        Each difference is a change: ``create`` (missing), ``update`` (migratable
        in place) or ``refuse`` (cannot change in place; the detail names the
        setting, both values and the manual steps).
        """

    @abstractmethod
    async def sync_schema(self, *, dry_run: bool = False) -> SchemaPlan:
        """Create what is missing and migrate what differs, in place; return the plan applied.

        Idempotent: a second call finds nothing to do, and replicas syncing at
        the same moment all succeed. Never loses a queued message. When any
        difference cannot be migrated in place, nothing is changed and
        :class:`~.errors.SchemaConflictError` is raised with the refusals. With
        ``dry_run`` nothing is changed and the plan is returned, refusals included.
        """


@runtime_checkable
class BrokerProtocol(
    JobQueueProtocol,
    ConsumerProtocol,
    SchemaSyncProtocol,
    Protocol,
):
    """Everything an adapter provides: the data plane (enqueue, consume, schema sync,
    stats) and, optionally, a store for the control plane.

    The ``framework_m.adapters`` entry point of a URL scheme names a class
    implementing this port; the registry builds instances with :meth:`from_url`.
    """

    #: The optional promises this adapter keeps (see :class:`~.capabilities.Capability`):
    #: set on the class; an instance keeps fewer where its URL turns one off.
    capabilities: frozenset[Capability]
    #: Counters of this instance: jobs stored and duplicates dropped by its enqueues.
    stats: BrokerStats

    @classmethod
    @abstractmethod
    def from_url(cls, url: str) -> Self:
        """A new, unconnected broker for ``url``; opens no connection.

        Raises :class:`~.errors.ConfigurationError` naming the problem for a
        URL of another scheme, an unknown or malformed option, or settings that
        do not fit together. Every process that opens the same URL reaches the
        same queue (for brokers that are shared between processes).
        """

    @property
    @abstractmethod
    def dedup_window(self) -> float:
        """Seconds during which an enqueue with a seen ``deduplication_id`` is a duplicate.

        Once :meth:`sync_schema` has returned, this is the window the broker
        actually enforces, whatever the URL asked for. *Optional*
        (:attr:`~.Capability.STORED_DEDUP_WINDOW`): the queue keeps its window, a URL
        asking for another plans a change (an ``update`` or a ``refuse``), and once
        connected to an existing queue this is the window the queue keeps, also for a
        replica that only plans.
        """

    @property
    def store(self) -> StoreProtocol:
        """The broker's store of records (:mod:`framework_m_core.ports.store`), over this
        broker's connection: usable between :meth:`connect` and :meth:`close`.

        *Optional* (:attr:`~.Capability.STORE`): without it every call of this store
        raises :class:`~.errors.BrokerError` (reading the attribute itself never does).
        """
        from .store_base import NoStore

        return NoStore(type(self).__name__)

    @property
    def expiring_store(self) -> StoreProtocol:
        """Where core keeps the records it always writes with a ttl (job statuses,
        results, cancel marks): :attr:`store`, unless that store keeps an expired record
        until its key is written again.

        Such an adapter (JetStream 2.9 keeps no ttl per key) gives here a second store
        that also drops every record :data:`~framework_m_core.ports.store.MAX_TTL` after
        its write at the latest, so records nobody reads again do not pile up; it is
        never written without a ttl. The two stores keep apart keys: a key is only ever
        written to one of them.
        """
        return self.store

    @property
    @abstractmethod
    def visibility_timeout(self) -> float:
        """Seconds a reserved delivery stays reserved without :meth:`extend`.

        The broker never delivers a reserved message again sooner than this.
        """

    @property
    @abstractmethod
    def display_url(self) -> str:
        """The broker URL with every credential masked, fit for logs.

        No password or token appears here, in ``repr()`` of the broker or its
        settings, or in the text of any error it raises.
        """

    @abstractmethod
    async def publish(self, message: JobMessage) -> PublishResult:
        """Enqueue a complete message (the ticker's way, to carry ``scheduled_at``).

        Same contract as :meth:`enqueue`; the result also says whether it was a
        duplicate. Of several publishes of one ``deduplication_id`` at once,
        exactly one is not a duplicate.
        """

    async def queue_stats(self) -> QueueStats:
        """How many messages the queue holds now, by the broker's own numbers.

        ``ready`` counts messages no consumer holds, ``reserved`` deliveries not
        settled, ``scheduled`` retries waiting out their delay (None when the broker
        holds them as reserved: ``reserved`` then counts them too), ``dead_letters``
        the dead-letter place, ``consumers`` the consumers attached. Counts every
        connection's messages, not this instance's; may trail a settle by a moment;
        changes nothing and costs a few round trips, so a scrape may call it.

        *Optional* (:attr:`~.Capability.QUEUE_STATS`): with it ``ready`` and
        ``dead_letters`` are numbers; a field the broker cannot tell is None. Without
        it every field is None. Raises :class:`~.errors.BrokerError` when the broker
        cannot be reached.
        """
        from .records import QueueStats

        return QueueStats()

    @abstractmethod
    async def connect(self) -> None:
        """Open connections. Idempotent.

        Raises :class:`~.errors.BrokerError` when the broker is unreachable or
        refuses the credentials. Before ``connect`` (and after :meth:`close`)
        every other I/O method raises :class:`~.errors.BrokerError`.
        """

    @abstractmethod
    async def close(self) -> None:
        """Close connections. Idempotent; also safe without :meth:`connect`.

        Deliveries still reserved are delivered again: *optional*
        (:attr:`~.Capability.REDELIVER_ON_CLOSE`) at once, otherwise once their
        visibility timeout passes.
        """


@runtime_checkable
class TickerProtocol(Protocol):
    """Turns schedules into enqueued jobs, one per slot, on every replica at once."""

    @abstractmethod
    def check(self) -> None:
        """Raise :class:`~.errors.ConfigurationError` when the ticker must not start.

        In particular when ``grace + clock_skew`` is not below the broker's dedup
        window: a late replica could then enqueue a slot the broker has forgotten.
        """

    @abstractmethod
    async def run(self) -> None:
        """Enqueue each due slot with ``deduplication_id='tick:{job}:{unix_seconds}'``.

        Runs until :meth:`stop`. Never publishes a slot older than the grace bound;
        on start fires at most the latest slot inside grace.
        """

    @abstractmethod
    def stop(self) -> None:
        """Ask :meth:`run` to return; no new slot is published after this call."""


@runtime_checkable
class RelayProtocol(Protocol):
    """Moves jobs written elsewhere (an outbox table) into the broker, beside the worker.

    ``m worker`` runs each relay it is given in its task tree, as it runs the ticker: a
    relay that dies stops the worker.
    """

    #: What the worker calls it in its logs ("outbox relay").
    name: str

    @abstractmethod
    def check(self, dedup_window: float) -> None:
        """Raise :class:`~.errors.ConfigurationError` when the relay must not start: when
        a job it published before a crash could be published again after the broker's
        dedup window (``dedup_window`` seconds) has forgotten the first copy."""

    @abstractmethod
    async def run(self) -> None:
        """Relay until :meth:`stop`. Out-of-reach sources and brokers are logged and tried
        again; only what cannot go on (a missing table the relay may not create) raises."""

    @abstractmethod
    def stop(self) -> None:
        """Ask :meth:`run` to return after the jobs it is publishing got their answer."""

    def described(self) -> dict[str, float]:
        """What the relay last saw, for the replica roll (say, rows waiting and the age of
        the oldest); empty when it has not looked yet."""
        return {}


@runtime_checkable
class JobWriterProtocol(Protocol):
    """Where a job is written as it is, to reach a broker later (the outbox)."""

    @abstractmethod
    async def write_job(self, message: JobMessage) -> str:
        """Store ``message`` (validated by the caller, as :func:`~.messages.new_message`
        makes it) to be published; return the id the job will have on the broker."""


@runtime_checkable
class SyncJobWriterProtocol(Protocol):
    """:class:`JobWriterProtocol` for plain ``def`` code."""

    @abstractmethod
    def write_job_sync(self, message: JobMessage) -> str:
        """:meth:`JobWriterProtocol.write_job`, blocking."""

"""The ports. Core code depends on these; adapters implement them.

``JobQueueProtocol`` is all an application needs to enqueue work. A broker
adapter implements :class:`BrokerProtocol`: the queue, the consuming side the
worker runs on, schema sync, and its lifecycle. ``framework_m_core.testing``
holds the contract suite that checks an adapter keeps every promise below.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .broker import BrokerStats, DeadLetter, Delivery, PublishResult
    from .messages import JobMessage
    from .schema import SchemaPlan


@runtime_checkable
class JobQueueProtocol(Protocol):
    """Where applications put jobs."""

    async def enqueue(
        self, job_name: str, /, deduplication_id: str | None = None, **kwargs: Any
    ) -> str:
        """Enqueue ``job_name`` to run with ``kwargs`` and return its job id.

        ``kwargs`` must be JSON-serializable; otherwise :class:`~.errors.InvalidJobError`
        is raised and nothing is sent. With a ``deduplication_id``, every enqueue
        with the same id inside the broker's dedup window after the first one is a
        duplicate: it sends nothing, returns normally with the *original* job's id,
        and is counted (``stats.duplicates``) and logged at debug level. A duplicate
        is never an error. Distinct ids are never merged. After the window has
        passed, the same id enqueues a new job. Raises :class:`~.errors.BrokerError`
        when the broker cannot be reached; retrying with the same
        ``deduplication_id`` is then safe.
        """
        ...


class ConsumerProtocol(Protocol):
    """The consuming side the worker runtime needs. Delivery is at-least-once.

    ``ack``, ``retry``, ``release`` and ``dead_letter`` raise
    :class:`~.errors.DeliveryLostError` when the reservation itself is gone (e.g.
    it was bound to a connection that closed) and the broker will deliver the
    message again on its own; any other error means "try the call again".
    """

    async def receive(self, max_messages: int, timeout: float) -> Sequence[Delivery]:
        """Take up to ``max_messages`` deliveries, waiting at most ``timeout`` seconds.

        Returns as soon as at least one delivery is available; returns an empty
        sequence when none arrived in time. Each delivery stays reserved for this
        consumer until it is acked, retried, released or dead-lettered, or until
        ``visibility_timeout`` passes without :meth:`extend`, after which the
        broker delivers it again with ``attempt`` one higher. Bytes are returned
        as stored: decoding and validating them is the worker's job.
        """
        ...

    async def ack(self, delivery: Delivery) -> None:
        """Remove a finished delivery for good. Called only after its handler succeeded."""
        ...

    async def retry(self, delivery: Delivery, delay: float) -> None:
        """Deliver again no sooner than ``delay`` seconds from now, with ``attempt`` + 1."""
        ...

    async def release(self, delivery: Delivery) -> None:
        """Hand an unfinished delivery back (worker shutting down) for immediate redelivery.

        A release is not a failure: where the broker can, it does not count as an attempt.
        """
        ...

    async def extend(self, delivery: Delivery) -> None:
        """Tell the broker the delivery is still being worked on: restart its visibility timeout."""
        ...

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        """Move the delivery, its bytes unchanged, to the dead-letter place with ``reason``.

        Afterwards it is never delivered from the work queue again.
        """
        ...

    async def dead_letters(self, limit: int = 100) -> Sequence[DeadLetter]:
        """The most recent dead letters, oldest first, at most ``limit``."""
        ...


class SchemaSyncProtocol(Protocol):
    """Keeps the broker's streams, queues and groups in line with what the code needs."""

    async def plan_schema(self) -> SchemaPlan:
        """Inspect the broker and say what differs from the desired layout. Changes nothing."""
        ...

    async def sync_schema(self, *, dry_run: bool = False) -> SchemaPlan:
        """Create what is missing and migrate what differs, in place; return the plan applied.

        Idempotent: a second call finds nothing to do. Never loses a queued message.
        When any difference cannot be migrated in place, nothing is changed and
        :class:`~.errors.SchemaConflictError` is raised naming the setting, both
        values and the manual steps. With ``dry_run`` only the plan is returned.
        """
        ...


@runtime_checkable
class BrokerProtocol(JobQueueProtocol, ConsumerProtocol, SchemaSyncProtocol, Protocol):
    """Everything an adapter provides. Instances are made by ``from_url`` (see the registry)."""

    #: Optional features the contract suite may test; see :class:`~.broker.Capability`.
    capabilities: frozenset[str]
    stats: BrokerStats

    @property
    def dedup_window(self) -> float:
        """Seconds during which an enqueue with a seen ``deduplication_id`` is a duplicate.

        After :meth:`connect` this is the window the broker actually enforces.
        """
        ...

    @property
    def visibility_timeout(self) -> float:
        """Seconds an unacked delivery stays reserved before it is delivered again."""
        ...

    @property
    def display_url(self) -> str:
        """The broker URL with every credential masked, fit for logs."""
        ...

    async def publish(self, message: JobMessage) -> PublishResult:
        """Enqueue a complete message (used by the ticker to carry ``scheduled_at``).

        Same deduplication contract as :meth:`enqueue`.
        """
        ...

    async def publish_raw(self, body: bytes) -> None:
        """Put ``body`` on the work queue unvalidated: for tests and repair tooling only."""
        ...

    async def connect(self) -> None:
        """Open connections. Idempotent. Raises :class:`~.errors.BrokerError` when unreachable."""
        ...

    async def close(self) -> None:
        """Close connections; reserved, unacked deliveries return to the broker. Idempotent."""
        ...


@runtime_checkable
class TickerProtocol(Protocol):
    """Turns schedules into enqueued jobs, one per slot, on every replica at once."""

    def check(self) -> None:
        """Raise :class:`~.errors.ConfigurationError` when the ticker must not start.

        In particular when ``grace + clock_skew`` is not below the broker's dedup
        window: a late replica could then enqueue a slot the broker has forgotten.
        """
        ...

    async def run(self) -> None:
        """Enqueue each due slot with ``deduplication_id='tick:{job}:{unix_seconds}'``.

        Runs until :meth:`stop`. Never publishes a slot older than the grace bound;
        on start fires at most the latest slot inside grace.
        """
        ...

    def stop(self) -> None:
        """Ask :meth:`run` to return; no new slot is published after this call."""
        ...

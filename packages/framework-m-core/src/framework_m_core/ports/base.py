""":class:`BaseBroker`, the half every adapter shares: validation, encoding, counting,
the schema-sync template and the connected guard."""

from __future__ import annotations

import asyncio
import logging
import time
from abc import abstractmethod
from collections.abc import Iterable, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypeVar

from ..control import keys
from ..control.shared import shared
from ..errors import BrokerError, ConfigurationError, InvalidJobError, SchemaConflictError
from ..observability import tracing
from . import statuses
from .capabilities import Capability, as_capabilities
from .messages import (
    JobMessage,
    due_time,
    new_message,
    validate_deduplication_id,
    validate_job_name,
)
from .protocols import BrokerProtocol
from .records import BatchJob, BrokerStats, EnqueueMemo, PublishResult
from .schema import SchemaPlan, SchemaRaceError

__all__ = ["BaseBroker", "BrokerSettings"]

log = logging.getLogger("framework_m.broker")

#: The largest encoded job, in bytes, an adapter without a limit of its broker's stores
#: unless its URL's ``max_job_size`` says otherwise: a job carries a reference to large
#: data (a key, a URL), not the data, which every retry and dead letter would copy.
DEFAULT_MAX_JOB_SIZE = 1 << 20


def max_job_size(value: int, most: int, shown: str) -> int:
    """``value`` of a URL's ``max_job_size`` option, checked against ``most`` (what the
    broker carries); ConfigurationError naming the range otherwise."""
    if not 1024 <= value <= most:
        raise ConfigurationError(
            f"max_job_size must be between 1,024 and {most:,} bytes, got {value:,} (in {shown!r})"
        )
    return value


T = TypeVar("T")
S = TypeVar("S", bound="BrokerSettings")
_SCHEMA_ROUNDS = 3
_BATCH_IN_FLIGHT = 100


class BrokerSettings(Protocol):
    """What :class:`BaseBroker` needs of an adapter's settings (parsed from the URL)."""

    @property
    def display_url(self) -> str: ...

    @property
    def dedup_window(self) -> float: ...


class BaseBroker(BrokerProtocol, Generic[S]):
    """The shared half of an adapter: validation, encoding, counting, the schema-sync
    template and the connected guard. Subclasses do the I/O.

    An adapter is built from its settings (``settings.py``: the URL parsed and
    validated, set as :attr:`parse_url`) and implements :meth:`_publish`,
    :meth:`_apply_schema` and the abstract methods of
    :class:`~.protocols.BrokerProtocol` that are left.
    """

    capabilities: frozenset[Capability] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.capabilities = as_capabilities(cls.capabilities, cls.__qualname__)

    def __init__(self, settings: S) -> None:
        self.settings = settings
        self.stats = BrokerStats()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.display_url}>"

    @staticmethod
    @abstractmethod
    def parse_url(url: str) -> S:
        """The adapter's settings for ``url``; ConfigurationError naming what is wrong."""

    @classmethod
    def from_url(cls, url: str) -> Self:
        return cls(cls.parse_url(url))

    @property
    def display_url(self) -> str:
        return self.settings.display_url

    @property
    def node(self) -> str | None:
        """The server this broker is connected to now (``host:port``) when its URL names
        several, for logs and ``m status``; None when there is only one, or it cannot tell."""
        return None

    @property
    def dedup_window(self) -> float:
        """The URL's window; adapters that read the broker's own override this."""
        return self.settings.dedup_window

    async def server_time(self) -> float | None:
        """The broker's wall clock now, in unix seconds; None when it exposes none.

        The ticker measures its replica's clock against it (:mod:`~.clocks`).
        Raises :class:`~.errors.BrokerError` when the broker cannot be reached.
        """
        return None

    def _connected(self, handle: T | None) -> T:
        """``handle`` (a client, connection or queue) while connected; else BrokerError."""
        if handle is None:
            raise self._not_connected()
        return handle

    def _not_connected(self) -> BrokerError:
        return BrokerError(f"{self.display_url} is not connected")

    # -- enqueueing ----------------------------------------------------------------------

    async def enqueue(
        self, job_name: str, /, deduplication_id: str | None = None, **kwargs: Any
    ) -> str:
        return (await self._send(new_message(job_name, deduplication_id, kwargs))).job_id

    async def enqueue_at(
        self,
        when: datetime | float,
        job_name: str,
        /,
        deduplication_id: str | None = None,
        **kwargs: Any,
    ) -> str:
        if Capability.DELAYED_ENQUEUE not in self.capabilities:
            return await super().enqueue_at(when, job_name, deduplication_id, **kwargs)
        due = due_time(when)
        message = new_message(job_name, deduplication_id, kwargs, not_before=due)
        return (await self._send(message)).job_id

    async def enqueue_job(
        self,
        job_name: str,
        deduplication_id: str | None,
        kwargs: dict[str, Any],
        *,
        at: datetime | float | None = None,
        keep: float | None = None,
    ) -> str:
        """:meth:`enqueue` (or :meth:`enqueue_at` with ``at``) of a job whose status is
        kept for ``keep`` seconds after it finished (0: none, not even while it waits);
        what job handles call."""
        if at is not None and Capability.DELAYED_ENQUEUE not in self.capabilities:
            return await super().enqueue_at(at, job_name, deduplication_id, **kwargs)
        due = None if at is None else due_time(at)
        message = new_message(job_name, deduplication_id, kwargs, not_before=due, keep=keep)
        return (await self._send(message)).job_id

    async def publish(self, message: JobMessage) -> PublishResult:
        validate_job_name(message.job_name)
        validate_deduplication_id(message.deduplication_id)
        return await self._send(message)

    def _prepare(self, message: JobMessage) -> JobMessage:
        """The message as it will be stored. Adapters that derive job ids (e.g. from the
        deduplication id) override this; it runs before the message is encoded."""
        return message

    @property
    def max_body_size(self) -> int | None:
        """The largest encoded job, in bytes, this broker stores; None when unbounded.

        Adapters whose broker refuses large messages (and then, like NATS, drops
        the connection) return what it carries less what they add to a copy; others a
        limit of their own, such as the ``max_job_size`` of their URL
        (``DEFAULT_MAX_JOB_SIZE``, 1 MiB, by default), named in ``max_body_size_option``.
        """
        return None

    #: The URL option that sets :attr:`max_body_size`, for the refusal's message.
    max_body_size_option: str | None = None

    async def _send(self, message: JobMessage) -> PublishResult:
        message = self._prepare(message)
        if tracing.active():
            with tracing.sending(message, self.display_url) as (traced, span):
                result = await self._encode_and_publish(traced)
                tracing.sent(span, result)
                return result
        return await self._encode_and_publish(message)

    async def _encode_and_publish(self, message: JobMessage) -> PublishResult:
        body = self._body(message)
        if (
            message.scheduled_at is None  # a tick's slot memo must name the job that landed
            and not self.memos_in_publish
            and self._keeps_status(message)
        ):
            return await self._publish_beside_memos(message, body)
        result = await self._publish(message, body)
        self._count(message, result)
        if not result.duplicate and not self.memos_in_publish:
            await self._create_enqueue_memos(message, result.job_id)
        return result

    async def _publish_beside_memos(self, message: JobMessage, body: bytes) -> PublishResult:
        """The enqueue memos of a job that is no tick are created while it is published,
        not a round trip after. Should the publish fail, or find a duplicate (the
        enqueue then returns the original's id), they name an id that was never given
        out, and the duplicate's are deleted again."""
        noting = asyncio.ensure_future(self._create_enqueue_memos(message, message.id))
        try:
            result = await self._publish(message, body)
        except BaseException:
            noting.cancel()
            raise
        await noting
        self._count(message, result)
        if result.duplicate:
            await self._delete_enqueue_memos(message)
        elif result.job_id != message.id:  # stored under an id of the broker's
            await self._create_enqueue_memos(message, result.job_id)
        return result

    async def _delete_enqueue_memos(self, message: JobMessage) -> None:
        """Delete the memos created for a duplicate, whose id nobody was given."""
        try:
            await shared(self).delete_memos(
                [m.key for m in self.enqueue_memos(message, message.id)]
            )
        except Exception as exc:  # they expire with their ttl
            log.debug("%s: the memos of a duplicate not deleted (%s)", message.id, exc)

    def _keeps_status(self, message: JobMessage) -> bool:
        """Whether an enqueue of ``message`` creates memos (:meth:`enqueue_memos`)."""
        return Capability.STORE in self.capabilities and message.keep != 0

    #: Whether ``_publish`` (and ``_publish_many``) create the memos of
    #: :meth:`enqueue_memos` themselves, in the step that stores the job; else they are
    #: created after it, one call each.
    memos_in_publish: bool = False

    def enqueue_memos(self, message: JobMessage, job_id: str) -> list[EnqueueMemo]:
        """The memos an enqueue of ``message`` creates once its job is stored as
        ``job_id`` (none on brokers without memos, or when its ``keep`` is 0): the job's
        status, and for a tick the memo naming the job its slot was enqueued as. Each is
        created, never overwriting: a worker that ran the job first wrote a later state."""
        if not self._keeps_status(message):
            return []
        now = time.time()
        keep = message.keep if message.keep is not None else statuses.PENDING_KEEP
        ttl = statuses.pending_ttl(keep, message.not_before, now)
        record = statuses.encode_status(statuses.enqueued_status(message, job_id))
        memos = [EnqueueMemo(keys.status(job_id), record, ttl)]
        dedup = message.deduplication_id
        if message.scheduled_at is not None and dedup is not None:
            memos.append(EnqueueMemo(keys.slot(dedup), job_id.encode(), ttl))
        return memos

    async def _create_enqueue_memos(self, message: JobMessage, job_id: str) -> None:
        """Create :meth:`enqueue_memos` of a job just stored. A failure is logged: the
        job is stored, and its worker keeps its status from its start on."""
        try:
            if memos := self.enqueue_memos(message, job_id):
                await shared(self).put_memos([(m.key, m.value, m.ttl, True) for m in memos])
        except Exception as exc:
            log.warning(
                "%s[%s] is enqueued but its status is not kept yet (%s)",
                message.job_name,
                job_id,
                exc,
            )

    def _body(self, message: JobMessage) -> bytes:
        body = message.encode()
        limit = self.max_body_size
        if limit is not None and len(body) > limit:
            option = self.max_body_size_option
            raise InvalidJobError(
                f"job {message.job_name!r} is {len(body):,} bytes encoded; "
                f"{self.display_url} stores at most {limit:,} bytes"
                + (f" (its URL option {option})" if option else "")
                + ": pass large data by reference (a key, a URL), not in kwargs"
            )
        return body

    def _count(self, message: JobMessage, result: PublishResult) -> None:
        if result.duplicate:
            self.stats.duplicates += 1
            log.debug(
                "duplicate enqueue of %s dropped (deduplication_id=%s, original job %s)",
                message.job_name,
                message.deduplication_id,
                result.job_id,
            )
        else:
            self.stats.enqueued += 1

    async def enqueue_many(self, jobs: Iterable[BatchJob]) -> list[str]:
        messages = [
            self._prepare(new_message(job.job_name, job.deduplication_id, dict(job.kwargs)))
            for job in jobs
        ]
        if tracing.active():  # a span for each, as enqueue() makes
            return [(await self._send(m)).job_id for m in messages]
        bodies = [self._body(m) for m in messages]  # all valid before anything is sent
        results = await self._publish_many(messages, bodies)
        for message, result in zip(messages, results, strict=True):
            self._count(message, result)
        if self.memos_in_publish:
            return [result.job_id for result in results]
        new = [(m, r.job_id) for m, r in zip(messages, results, strict=True) if not r.duplicate]
        for start in range(0, len(new), _BATCH_IN_FLIGHT):
            await asyncio.gather(
                *(
                    self._create_enqueue_memos(m, job_id)
                    for m, job_id in new[start : start + _BATCH_IN_FLIGHT]
                )
            )
        return [result.job_id for result in results]

    async def _publish_many(
        self, messages: Sequence[JobMessage], bodies: Sequence[bytes]
    ) -> list[PublishResult]:
        """:meth:`_publish` of each, up to 100 at once; adapters that can send a batch in
        fewer round trips (a pipeline) override this. Results in the messages' order.

        A message whose deduplication id an earlier one of the batch carries is not
        sent: it is a duplicate of that one, whatever order concurrent publishes land
        in, so the earlier job is always the one stored.
        """
        first: dict[str, int] = {}  # deduplication id -> the index that carries it first
        sent: list[int] = []
        for i, message in enumerate(messages):
            dedup_id = message.deduplication_id
            if dedup_id is None or first.setdefault(dedup_id, i) == i:
                sent.append(i)
        results: dict[int, PublishResult] = {}
        for start in range(0, len(sent), _BATCH_IN_FLIGHT):
            chunk = sent[start : start + _BATCH_IN_FLIGHT]
            published = await asyncio.gather(
                *(self._publish(messages[i], bodies[i]) for i in chunk)
            )
            results.update(zip(chunk, published, strict=True))
        out: list[PublishResult] = []
        for i, message in enumerate(messages):
            if i in results:
                out.append(results[i])
            else:  # a later copy of an id in the batch: the first one's job
                original = results[first[message.deduplication_id or ""]]
                out.append(PublishResult(original.job_id, duplicate=True))
        return out

    @abstractmethod
    async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
        """Store ``body`` unless ``message.deduplication_id`` was seen inside the window;
        with ``message.not_before`` (adapters with ``DELAYED_ENQUEUE``), hold it until then.

        Returns the stored job's id and ``duplicate=False``, or the original's id
        and ``duplicate=True``. Raises :class:`~.errors.BrokerError` on failure.
        """

    # -- schema sync ---------------------------------------------------------------------

    async def sync_schema(self, *, dry_run: bool = False) -> SchemaPlan:
        for _ in range(_SCHEMA_ROUNDS):
            plan = await self.plan_schema()
            if dry_run or plan.in_sync:
                return plan
            if plan.refused:
                raise SchemaConflictError("; ".join(str(c) for c in plan.refused))
            try:
                await self._apply_schema(plan)
            except SchemaRaceError:
                continue  # another replica changed the schema meanwhile: plan again
            return plan
        raise BrokerError(
            f"schema sync of {self.display_url} kept racing with other replicas; try again"
        )

    @abstractmethod
    async def _apply_schema(self, plan: SchemaPlan) -> None:
        """Carry out a plan without refusals (each change's ``step`` is the adapter's own).

        Raise :class:`~.schema.SchemaRaceError` when another replica changed the
        schema meanwhile: :meth:`sync_schema` then plans again.
        """

    # -- lifecycle -----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

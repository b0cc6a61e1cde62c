"""Data the ports exchange, and :class:`BaseBroker`, the shared half of every adapter."""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ClassVar, NamedTuple, Self

from .messages import JobMessage, validate_deduplication_id, validate_job_name
from .schema import SchemaPlan

log = logging.getLogger("framework_m.broker")


class Capability:
    """Names of optional adapter features the contract suite checks when declared."""

    #: ``dead_letters()`` returns what ``dead_letter()`` stored.
    DEAD_LETTER_INSPECTION = "dead_letter_inspection"
    #: ``publish_raw()`` puts arbitrary bytes on the work queue (garbage-message tests).
    RAW_PUBLISH = "raw_publish"
    #: A delivery reserved by a consumer that closes without acking is delivered again.
    REDELIVER_ON_CLOSE = "redeliver_on_close"
    #: The broker is shared between processes (``m enqueue`` from another process works).
    CROSS_PROCESS = "cross_process"
    #: A deduplication id reused after the window gets a new job id. Brokers that cannot
    #: say which message they kept derive the id from the deduplication id instead.
    NEW_ID_AFTER_WINDOW = "new_id_after_window"


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


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message that will not be delivered again, with why."""

    body: bytes
    reason: str
    attempts: int
    dead_lettered_at: float


@dataclass(slots=True)
class BrokerStats:
    """Counters of one broker instance."""

    enqueued: int = 0
    duplicates: int = 0


class BaseBroker(ABC):
    """Validation, encoding and counting shared by adapters; subclasses do the I/O.

    Subclasses implement :meth:`from_url`, :meth:`_publish` and the consuming,
    schema and lifecycle methods of :class:`~.protocols.BrokerProtocol`.
    """

    capabilities: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, url: str) -> None:
        from .urls import redact_url

        self._display_url = redact_url(url)
        self.stats = BrokerStats()

    @classmethod
    @abstractmethod
    def from_url(cls, url: str) -> Self:
        """Build an unconnected broker from its URL; raise ConfigurationError for bad options."""

    @property
    def display_url(self) -> str:
        return self._display_url

    @property
    @abstractmethod
    def dedup_window(self) -> float: ...

    @property
    @abstractmethod
    def visibility_timeout(self) -> float: ...

    async def enqueue(
        self, job_name: str, /, deduplication_id: str | None = None, **kwargs: Any
    ) -> str:
        message = JobMessage(
            job_name=validate_job_name(job_name),
            kwargs=kwargs,
            deduplication_id=validate_deduplication_id(deduplication_id),
            enqueued_at=time.time(),
        )
        return (await self._send(message)).job_id

    async def publish(self, message: JobMessage) -> PublishResult:
        validate_job_name(message.job_name)
        validate_deduplication_id(message.deduplication_id)
        return await self._send(message)

    def _prepare(self, message: JobMessage) -> JobMessage:
        """The message as it will be stored. Adapters that derive job ids (e.g. from the
        deduplication id) override this; it runs before the message is encoded."""
        return message

    async def _send(self, message: JobMessage) -> PublishResult:
        message = self._prepare(message)
        body = message.encode()
        result = await self._publish(message, body)
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
        return result

    @abstractmethod
    async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
        """Store ``body`` unless ``message.deduplication_id`` was seen inside the window."""

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

    @abstractmethod
    async def connect(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def receive(self, max_messages: int, timeout: float) -> Sequence[Delivery]: ...

    @abstractmethod
    async def ack(self, delivery: Delivery) -> None: ...

    @abstractmethod
    async def retry(self, delivery: Delivery, delay: float) -> None: ...

    @abstractmethod
    async def release(self, delivery: Delivery) -> None: ...

    @abstractmethod
    async def extend(self, delivery: Delivery) -> None: ...

    @abstractmethod
    async def dead_letter(self, delivery: Delivery, reason: str) -> None: ...

    @abstractmethod
    async def dead_letters(self, limit: int = 100) -> Sequence[DeadLetter]: ...

    @abstractmethod
    async def publish_raw(self, body: bytes) -> None: ...

    @abstractmethod
    async def plan_schema(self) -> SchemaPlan: ...

    @abstractmethod
    async def sync_schema(self, *, dry_run: bool = False) -> SchemaPlan: ...

"""``amqp://``: framework-m on RabbitMQ with a message-deduplication exchange.

Topology (names from ``queue``, default ``framework_m``): an exchange
``<queue>.dedup`` of type ``x-message-deduplication`` (the community plugin or
framework-m's own, ``x-cache-ttl`` = the dedup window, ``x-cache-persistence``
``disk`` by default so that the window survives a broker restart) feeding the durable
quorum queue ``<queue>.jobs``; retries wait in ``<queue>.retry.<ms>`` queues
whose TTL dead-letters them back to the jobs queue; dead letters go to
``<queue>.dead``: the worker's (with the reason) and, as a backstop, the
queue's own once a message was delivered ``delivery_limit`` times without an
outcome (a job that kills its worker every time). The delivery limit, the one
setting RabbitMQ lets change at run time, lives in the policy
``framework-m.<queue>`` applied through the management HTTP API.

The exchange routes a duplicate nowhere, so a ``mandatory`` publish comes back
as basic.return. RabbitMQ does not say which message it kept, so a job with a
deduplication id gets an id derived from it (``uuid5``): every replica's
duplicate then answers with the stored job's id.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any, Self

import aio_pika
import aiormq
from aio_pika.abc import (
    AbstractChannel,
    AbstractConnection,
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractQueue,
)
from aio_pika.exceptions import ChannelInvalidStateError, DeliveryError, PublishError

from framework_m_core.broker import BaseBroker, Capability, DeadLetter, Delivery, PublishResult
from framework_m_core.errors import (
    BrokerError,
    DeliveryLostError,
    SchemaConflictError,
)
from framework_m_core.messages import JobMessage
from framework_m_core.schema import SchemaChange, SchemaPlan

from .management import Policy
from .settings import RabbitSettings

log = logging.getLogger("framework_m.rabbitmq")

EXCHANGE_TYPE = "x-message-deduplication"
DEDUP_HEADER = "x-deduplication-header"
ATTEMPTS_HEADER = "x-fm-attempts"  # attempts before this copy (retries republish)
REASON_HEADER = "x-fm-reason"
DEAD_AT_HEADER = "x-fm-dead-at"
_ID_NAMESPACE = uuid.UUID("6f1c1a52-6c1e-4d39-9a52-2f7b8f3c5e10")
# Retry delays are rounded up to one of these (ms); each has its own TTL queue,
# so a long delay never holds back a short one.
_RETRY_BUCKETS_MS = (
    100,
    250,
    500,
    1000,
    2000,
    5000,
    10_000,
    30_000,
    60_000,
    120_000,
    300_000,
    600_000,
    1_800_000,
    3_600_000,
)
_CONSUMER_TIMEOUT = 1800.0  # RabbitMQ's default consumer_timeout: the visibility timeout
PLUGIN_HINT = (
    "enable the rabbitmq-message-deduplication plugin, or framework-m's own "
    "(packages/adapter-rabbitmq/plugin/build.sh)"
)


def dedup_job_id(deduplication_id: str) -> str:
    """The job id of a job enqueued with ``deduplication_id`` (the same on every replica)."""
    return uuid.uuid5(_ID_NAMESPACE, deduplication_id).hex


class RabbitBroker(BaseBroker):
    """RabbitMQ adapter; see the module docstring."""

    capabilities = frozenset(
        {
            Capability.DEAD_LETTER_INSPECTION,
            Capability.RAW_PUBLISH,
            Capability.REDELIVER_ON_CLOSE,
            Capability.CROSS_PROCESS,
        }
    )

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.settings = RabbitSettings.from_url(url)
        self.queue_name = self.settings.queue
        self.management = self.settings.management
        self._policy_warned = False
        self._lost_at: float | None = None
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._exchange: AbstractExchange | None = None
        self._buffer: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
        self._consuming: AbstractQueue | None = None
        self._retry_queues: set[str] = set()
        self._reopening = asyncio.Lock()  # one reconnect at a time, whoever notices first
        self._unbound_warned = False

    @classmethod
    def from_url(cls, url: str) -> Self:
        return cls(url)

    @property
    def dedup_window(self) -> float:
        return self.settings.dedup_window

    @property
    def visibility_timeout(self) -> float:
        return _CONSUMER_TIMEOUT

    @property
    def names(self) -> dict[str, str]:
        q = self.queue_name
        return {
            "exchange": f"{q}.dedup",
            "jobs": f"{q}.jobs",
            "dead": f"{q}.dead",
            "policy": f"framework-m.{q}",
        }

    @property
    def policy(self) -> Policy:
        """The policy holding the jobs queue's run-time settings."""
        return Policy(
            pattern=f"^{re.escape(self.names['jobs'])}$",
            definition={"delivery-limit": self.settings.delivery_limit},
            priority=self.settings.policy_priority,
        )

    @property
    def channel(self) -> AbstractChannel:
        if self._channel is None:
            raise BrokerError(f"{self.display_url} is not connected")
        return self._channel

    async def connect(self) -> None:
        if self._connection is not None:
            return
        try:
            self._connection = await self._open_connection()
            self._channel = await self._connection.channel(
                publisher_confirms=True, on_return_raises=True
            )
            await self._channel.set_qos(prefetch_count=self.settings.prefetch)
        except (aiormq.exceptions.AMQPError, OSError, ConnectionError) as exc:
            raise BrokerError(f"cannot connect to {self.display_url}: {exc}") from None

    async def _open_connection(self) -> AbstractConnection:
        return await aio_pika.connect(
            self.settings.connection_url, timeout=self.settings.connect_timeout
        )

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        self._channel = self._exchange = self._consuming = None
        self._buffer = asyncio.Queue()
        self._retry_queues.clear()  # a new connection may meet a broker that lost them
        if connection is not None:
            await connection.close()  # unacked deliveries return to the queue

    # -- schema ------------------------------------------------------------------------

    def _exchange_args(self) -> dict[str, Any]:
        return {
            "x-cache-size": self.settings.cache_size,
            "x-cache-ttl": int(self.settings.dedup_window * 1000),
            "x-cache-persistence": self.settings.cache_persistence,
        }

    def _jobs_args(self) -> dict[str, Any]:
        return {
            "x-queue-type": "quorum",
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": self.names["dead"],
        }

    async def _probe(self, declare: Any) -> str | None:
        """Run a declaration on a throwaway channel; return the server's refusal, if any."""
        if self._connection is None:
            raise BrokerError(f"{self.display_url} is not connected")
        try:
            channel = await self._connection.channel()
        except (aiormq.exceptions.AMQPError, ConnectionError, ChannelInvalidStateError) as exc:
            raise BrokerError(f"cannot open a channel on {self.display_url}: {exc}") from None
        try:
            await declare(channel)
            return None
        except aiormq.exceptions.ChannelClosed as exc:
            return str(exc)
        finally:
            if not channel.is_closed:
                await channel.close()

    async def plan_schema(self) -> SchemaPlan:
        if self._connection is None:
            raise BrokerError(f"{self.display_url} is not connected")
        n = self.names
        changes: list[SchemaChange] = []
        checks = [
            (
                f"exchange {n['exchange']}",
                lambda ch, passive: ch.declare_exchange(
                    n["exchange"],
                    EXCHANGE_TYPE,
                    durable=True,
                    arguments=self._exchange_args(),
                    passive=passive,
                ),
                f"type {EXCHANGE_TYPE}, x-cache-ttl {int(self.settings.dedup_window * 1000)} ms, "
                f"x-cache-persistence {self.settings.cache_persistence}",
            ),
            (
                f"queue {n['jobs']}",
                lambda ch, passive: ch.declare_queue(
                    n["jobs"], durable=True, arguments=self._jobs_args(), passive=passive
                ),
                f"durable quorum queue, bound to the exchange, dead-lettering to {n['dead']}",
            ),
            (
                f"queue {n['dead']}",
                lambda ch, passive: ch.declare_queue(n["dead"], durable=True, passive=passive),
                "durable dead-letter queue",
            ),
        ]
        for target, declare, detail in checks:
            missing = await self._probe(lambda ch, d=declare: d(ch, True))
            if missing is not None:
                if target.startswith("exchange") and not await self._exchange_type_known():
                    detail = f"the broker has no exchange type {EXCHANGE_TYPE!r}: {PLUGIN_HINT}"
                    changes.append(SchemaChange("refuse", target, detail))
                else:
                    changes.append(SchemaChange("create", target, detail))
                continue
            refused = await self._probe(lambda ch, d=declare: d(ch, False))
            if refused is not None:
                changes.append(
                    SchemaChange(
                        "refuse",
                        target,
                        f"exists with other arguments ({refused}); delete it (after moving its "
                        "messages) and run `m migrate`",
                    )
                )
        changes += await self._plan_policy()
        return SchemaPlan(tuple(changes))

    async def _exchange_type_known(self) -> bool:
        """Declare and delete a probe exchange of the type on a connection of its own:
        RabbitMQ answers an unknown type by closing the whole connection."""
        probe = f"{self.names['exchange']}.probe-{uuid.uuid4().hex[:8]}"
        try:
            connection = await self._open_connection()
        except (aiormq.exceptions.AMQPError, OSError, ConnectionError) as exc:
            raise BrokerError(f"cannot connect to {self.display_url}: {exc}") from None
        try:
            with _quiet("aiormq.connection"):  # it logs the expected close as an error
                channel = await connection.channel()
                exchange = await channel.declare_exchange(
                    probe, EXCHANGE_TYPE, auto_delete=True, arguments={"x-cache-size": 1}
                )
                await exchange.delete()
            return True
        except (aiormq.exceptions.AMQPError, ConnectionError) as exc:
            if "exchange type" in str(exc):
                return False
            raise BrokerError(f"cannot probe exchange type {EXCHANGE_TYPE!r}: {exc}") from None
        finally:
            with contextlib.suppress(aiormq.exceptions.AMQPError, OSError, ConnectionError):
                await connection.close()

    async def _plan_policy(self) -> list[SchemaChange]:
        if self.management is None:
            return []
        name, want = self.names["policy"], self.policy
        target = f"policy {name}"
        try:
            current = await self.management.get_policy(name)
        except BrokerError as exc:
            self._warn_unmanaged(str(exc))
            return []
        if current is None:
            detail = f"delivery-limit {self.settings.delivery_limit} on {self.names['jobs']}"
            return [SchemaChange("create", target, detail)]
        diffs = want.differences(current)
        if diffs:
            return [SchemaChange("update", target, ", ".join(diffs))]
        try:
            in_effect = await self.management.queue_policy(self.names["jobs"])
        except BrokerError as exc:
            self._warn_unmanaged(str(exc))
            return []
        if in_effect not in (None, name):
            log.warning(
                "amqp: policy %s, not %s, is in effect on %s (RabbitMQ applies the one with "
                "the highest priority): the delivery limit is whatever %s says; raise "
                "policy_priority or fold delivery-limit into it",
                in_effect,
                name,
                self.names["jobs"],
                in_effect,
            )
        return []

    def _warn_unmanaged(self, reason: str) -> None:
        if self._policy_warned:
            return
        self._policy_warned = True
        p = self.policy
        log.warning(
            "amqp: %s; the delivery-limit backstop of %s is not managed. Set it yourself: "
            "rabbitmqctl set_policy -p %s --apply-to queues --priority %d %s '%s' '%s' "
            "(or pass ?management=URL, or ?management=off to silence this)",
            reason,
            self.names["jobs"],
            self.management.vhost if self.management else "/",
            p.priority,
            self.names["policy"],
            p.pattern,
            json.dumps(p.definition),
        )

    async def sync_schema(self, *, dry_run: bool = False) -> SchemaPlan:
        plan = await self.plan_schema()
        if plan.refused:
            if dry_run:
                return plan
            raise SchemaConflictError("; ".join(str(c) for c in plan.refused))
        if dry_run:
            return plan
        n = self.names
        channel = self.channel
        try:
            self._exchange = await channel.declare_exchange(
                n["exchange"], EXCHANGE_TYPE, durable=True, arguments=self._exchange_args()
            )
        except aiormq.exceptions.AMQPError as exc:
            await self._reopen()
            if "invalid exchange type" in str(exc) or "unknown exchange type" in str(exc):
                raise BrokerError(
                    f"the broker has no exchange type {EXCHANGE_TYPE!r}: {PLUGIN_HINT}"
                ) from None
            raise BrokerError(f"cannot declare exchange {n['exchange']}: {exc}") from None
        try:
            await channel.declare_queue(n["dead"], durable=True)
            jobs = await channel.declare_queue(n["jobs"], durable=True, arguments=self._jobs_args())
            await jobs.bind(self._exchange)
        except aiormq.exceptions.AMQPError as exc:
            await self._reopen()
            raise BrokerError(f"cannot declare the queues of {n['jobs']}: {exc}") from None
        if self.management is not None and any(
            c.target == f"policy {n['policy']}" for c in plan.changes
        ):
            await self.management.put_policy(n["policy"], self.policy)
            log.info(
                "amqp: policy %s set: delivery-limit %d", n["policy"], self.settings.delivery_limit
            )
        return plan

    async def _reopen(self) -> None:
        async with self._reopening:
            await self._reopen_now()

    async def _reopen_now(self) -> None:
        with contextlib.suppress(aiormq.exceptions.AMQPError, OSError, ConnectionError):
            await self.close()  # the old connection may be gone already
        await self.connect()

    def _is_open(self) -> bool:
        connection, channel = self._connection, self._channel
        alive = connection is not None and not connection.is_closed
        return alive and channel is not None and not channel.is_closed

    async def _ensure_open(self) -> None:
        """Reconnect when the connection dropped; deliveries it held return to the queue."""
        if self._is_open():
            return
        async with self._reopening:
            if self._is_open():  # another task reconnected while this one waited
                return
            if self._connection is not None:
                log.warning("amqp: connection to %s lost; reconnecting", self.display_url)
                self._lost_at = time.monotonic()
            await self._reopen_now()
        if self._lost_at is not None:
            down, self._lost_at = time.monotonic() - self._lost_at, None
            log.warning("amqp: reconnected to %s after %.1fs", self.display_url, down)

    # -- publishing --------------------------------------------------------------------

    async def _exchange_ready(self) -> AbstractExchange:
        """The exchange, with the jobs queue bound to it (once per connection).

        A duplicate and a message that no binding takes both come back as a return;
        binding again (idempotent) before the first publish keeps the second case from
        passing for the first and losing a job silently.
        """
        if self._exchange is None:
            n = self.names
            try:
                exchange = await self.channel.get_exchange(n["exchange"])
                jobs = await self.channel.get_queue(n["jobs"])
                await jobs.bind(exchange)
            except aiormq.exceptions.ChannelNotFoundEntity as exc:
                await self._reopen()
                raise BrokerError(
                    f"{exc.args[0] if exc.args else exc}: run schema sync (m migrate)"
                ) from None
            except aiormq.exceptions.ChannelAccessRefused as exc:
                # A producer without configure permission: publish without the guarantee.
                await self._reopen()
                self._warn_unbound(str(exc))
                exchange = await self.channel.get_exchange(n["exchange"])
            except aiormq.exceptions.AMQPError as exc:
                await self._reopen()
                raise BrokerError(f"cannot use exchange {n['exchange']}: {exc}") from None
            self._exchange = exchange
        return self._exchange

    def _warn_unbound(self, reason: str) -> None:
        if not self._unbound_warned:
            self._unbound_warned = True
            log.warning(
                "amqp: cannot bind %s to %s before publishing (%s); a job that no binding "
                "takes would be counted as a duplicate: keep the topology in place with "
                "`m migrate` run by a user with configure permission",
                self.names["jobs"],
                self.names["exchange"],
                reason,
            )

    def _prepare(self, message: JobMessage) -> JobMessage:
        dedup = message.deduplication_id
        if dedup is None:
            return message
        return _with_id(message, dedup_job_id(dedup))

    async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
        dedup, job_id = message.deduplication_id, message.id
        headers: dict[str, Any] = {DEDUP_HEADER: dedup} if dedup is not None else {}
        amqp_message = aio_pika.Message(
            body,
            headers=headers,
            message_id=job_id,
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            content_type="application/json",
        )
        await self._ensure_open()
        exchange = self._exchange or await self._exchange_ready()
        try:
            await exchange.publish(amqp_message, routing_key="", mandatory=True)
        except PublishError:  # basic.return: routed nowhere
            if dedup is None:
                raise BrokerError(
                    f"exchange {self.names['exchange']} routed a job nowhere: is the queue "
                    "bound? run `m migrate`"
                ) from None
            return PublishResult(job_id, duplicate=True)
        except DeliveryError as exc:  # basic.nack: the broker did not take it
            raise BrokerError(f"the broker refused the job (basic.nack): {exc}") from None
        except (aiormq.exceptions.AMQPError, ConnectionError, ChannelInvalidStateError) as exc:
            raise BrokerError(f"publish failed: {exc}") from None
        return PublishResult(job_id)

    async def publish_raw(self, body: bytes) -> None:
        await self.channel.default_exchange.publish(
            aio_pika.Message(body), routing_key=self.names["jobs"], mandatory=True
        )

    # -- consuming ---------------------------------------------------------------------

    async def receive(self, max_messages: int, timeout: float) -> Sequence[Delivery]:
        await self._ensure_open()
        if self._consuming is None:
            try:
                queue = await self.channel.get_queue(self.names["jobs"])
            except aiormq.exceptions.ChannelNotFoundEntity:
                await self._reopen()
                raise BrokerError(
                    f"queue {self.names['jobs']} does not exist: run schema sync (m migrate)"
                ) from None
            await queue.consume(self._buffer.put)
            self._consuming = queue
        try:
            first = await asyncio.wait_for(self._buffer.get(), timeout)
        except TimeoutError:
            return []
        out = [first]
        while len(out) < max_messages and not self._buffer.empty():
            out.append(self._buffer.get_nowait())
        return [_delivery(m) for m in out]

    async def ack(self, delivery: Delivery) -> None:
        await _msg(delivery).ack()

    async def retry(self, delivery: Delivery, delay: float) -> None:
        ms = next((b for b in _RETRY_BUCKETS_MS if b >= delay * 1000), _RETRY_BUCKETS_MS[-1])
        name = f"{self.queue_name}.retry.{ms}"
        msg = _msg(delivery)  # first: a lost delivery comes back by itself, copying it doubles it
        if name not in self._retry_queues:
            arguments = {
                "x-message-ttl": ms,
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": self.names["jobs"],
            }
            # On a channel of its own: a refusal closes that one, not the consumer's.
            refused = await self._probe(
                lambda ch: ch.declare_queue(name, durable=True, arguments=arguments)
            )
            if refused is not None:
                raise BrokerError(f"cannot declare retry queue {name}: {refused}")
            self._retry_queues.add(name)
        copy = aio_pika.Message(
            delivery.body,
            headers={ATTEMPTS_HEADER: delivery.attempt},
            message_id=msg.message_id,
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        )
        await self._publish_copy(copy, name)
        await msg.ack()

    async def _publish_copy(self, message: aio_pika.Message, queue: str) -> None:
        """Publish to ``queue`` (confirmed, mandatory); raise BrokerError unless it is there."""
        try:
            await self.channel.default_exchange.publish(message, routing_key=queue, mandatory=True)
        except PublishError:
            self._retry_queues.discard(queue)  # declared again on the next try
            raise BrokerError(f"queue {queue} does not exist") from None
        except (aiormq.exceptions.AMQPError, ConnectionError, ChannelInvalidStateError) as exc:
            raise BrokerError(f"publish to {queue} failed: {exc}") from None

    async def release(self, delivery: Delivery) -> None:
        await _msg(delivery).nack(requeue=True)

    async def extend(self, delivery: Delivery) -> None:
        """RabbitMQ keeps an unacked delivery with its consumer until the channel closes."""

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        msg = _msg(delivery)
        copy = aio_pika.Message(
            delivery.body,
            headers={
                REASON_HEADER: reason,
                ATTEMPTS_HEADER: delivery.attempt,
                DEAD_AT_HEADER: f"{time.time():.3f}",
            },
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        )
        await self._publish_copy(copy, self.names["dead"])
        await msg.ack()

    async def dead_letters(self, limit: int = 100) -> Sequence[DeadLetter]:
        """Peek: every message is fetched, then all are put back in order."""
        channel = await self._connection_channel()
        try:
            queue = await channel.get_queue(self.names["dead"])
            taken: list[AbstractIncomingMessage] = []
            while (msg := await queue.get(no_ack=False, fail=False)) is not None:
                taken.append(msg)
            out = [_dead_letter(m, self.settings.delivery_limit) for m in taken]
            if taken:
                await taken[-1].nack(multiple=True, requeue=True)
            return out[-limit:] if limit > 0 else []
        finally:
            await channel.close()

    async def _connection_channel(self) -> AbstractChannel:
        if self._connection is None:
            raise BrokerError(f"{self.display_url} is not connected")
        return await self._connection.channel()


def _with_id(message: JobMessage, job_id: str) -> JobMessage:
    return JobMessage(
        job_name=message.job_name,
        kwargs=message.kwargs,
        id=job_id,
        deduplication_id=message.deduplication_id,
        enqueued_at=message.enqueued_at,
        scheduled_at=message.scheduled_at,
    )


@contextlib.contextmanager
def _quiet(logger: str) -> Iterator[None]:
    """Drop the records of ``logger`` while the block runs."""
    target = logging.getLogger(logger)
    drop = logging.Filter("\0")  # matches no logger name: every record is dropped
    target.addFilter(drop)
    try:
        yield
    finally:
        target.removeFilter(drop)


def _dead_letter(msg: AbstractIncomingMessage, delivery_limit: int) -> DeadLetter:
    """A message of the dead queue: put there by a worker, or by the queue's delivery limit
    (after ``delivery_limit`` returns, so one delivery more than that)."""
    headers = msg.headers or {}
    if REASON_HEADER in headers:
        return DeadLetter(
            body=msg.body,
            reason=str(headers[REASON_HEADER]),
            attempts=int(headers.get(ATTEMPTS_HEADER, 0) or 0),  # type: ignore[arg-type]
            dead_lettered_at=float(headers.get(DEAD_AT_HEADER, 0) or 0),  # type: ignore[arg-type]
        )
    deaths = headers.get("x-death")
    death: dict[str, Any] = deaths[0] if isinstance(deaths, list) and deaths else {}  # type: ignore[assignment]
    why = str(death.get("reason", "unknown"))
    before = int(headers.get(ATTEMPTS_HEADER, 0) or 0)  # type: ignore[arg-type]
    if why == "delivery_limit":
        reason = (
            "RabbitMQ dead-lettered it: returned to the queue more often than its "
            "delivery-limit without an outcome (did the job kill its worker?)"
        )
        attempts = before + delivery_limit + 1
    else:
        reason, attempts = f"RabbitMQ dead-lettered it: {why}", before
    at = death.get("time")
    return DeadLetter(
        body=msg.body,
        reason=reason,
        attempts=attempts,
        dead_lettered_at=at.timestamp() if isinstance(at, datetime) else 0.0,
    )


def _delivery(msg: AbstractIncomingMessage) -> Delivery:
    headers = msg.headers or {}
    before = int(headers.get(ATTEMPTS_HEADER, 0) or 0)  # type: ignore[arg-type]
    redelivered = int(headers.get("x-delivery-count", 0) or 0)  # type: ignore[arg-type]
    return Delivery(msg.body, before + redelivered + 1, msg)


def _msg(delivery: Delivery) -> AbstractIncomingMessage:
    """The delivery's message, while the channel it arrived on is open."""
    if not isinstance(delivery.handle, aio_pika.IncomingMessage):
        raise BrokerError("delivery was not received from this RabbitMQ broker")
    try:
        delivery.handle.channel  # noqa: B018 - raises once the channel is closed
    except ChannelInvalidStateError:
        raise DeliveryLostError(
            "the channel it arrived on is closed; RabbitMQ delivers it again"
        ) from None
    return delivery.handle

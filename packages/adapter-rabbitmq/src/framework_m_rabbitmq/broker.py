"""``amqp://``: framework-m on RabbitMQ with a message-deduplication exchange.

Topology (see :mod:`~framework_m_rabbitmq.schema`): an exchange ``<queue>.dedup`` of type
``x-message-deduplication`` (``x-cache-ttl`` = the dedup window) feeding the
quorum queue ``<queue>.jobs``; retries wait in ``<queue>.retry.<ms>`` queues
whose TTL dead-letters them back; dead letters go to ``<queue>.dead``: the
worker's (with the reason) and the queue's own past ``delivery_limit``.

The exchange routes a duplicate nowhere, so a ``mandatory`` publish comes back
as basic.return. RabbitMQ does not say which message it kept, so a job with a
deduplication id gets an id derived from it (``uuid5``): every replica's
duplicate then answers with the stored job's id.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import aio_pika
import aiormq
from aio_pika.abc import AbstractExchange
from aiormq.abc import AbstractChannel as UnderlayChannel
from aiormq.abc import DeliveredMessage

from framework_m_core.ports import (
    BaseBroker,
    BrokerError,
    DeadLetter,
    Delivery,
    DeliveryLostError,
    JobMessage,
    PublishResult,
    QueueStats,
    SchemaPlan,
)
from framework_m_core.ports import Capability as C
from framework_m_core.ports.store import StoreProtocol

from . import deadletters, delays, publishing, stats, wire
from .acks import ChannelAcks
from .connection import AMQP_ERRORS, Link
from .received import Received
from .schema import RabbitSchema
from .settings import RabbitSettings, parse_url
from .store import RabbitStore

log = logging.getLogger("framework_m.rabbitmq")

_CONSUMER_TIMEOUT = 1800.0  # RabbitMQ's default consumer_timeout: the visibility timeout


class RabbitBroker(BaseBroker[RabbitSettings]):
    """RabbitMQ adapter; see the module docstring."""

    capabilities = frozenset(
        {
            C.DEAD_LETTER_INSPECTION,
            C.DEAD_LETTER_REMOVAL,
            C.REDELIVER_ON_CLOSE,
            C.REDELIVER_ON_DISCONNECT,
            C.CROSS_PROCESS,
            C.QUEUE_STATS,
            C.DELAYED_ENQUEUE,
            C.STORE_DEADLINE,  # framework-m's exchange plugin; not the community one
            C.STORED_DEDUP_WINDOW,
            C.UNCOUNTED_RELEASE,
            C.STORE,  # framework-m's plugin: the x-fm-store exchange
        }
    )
    parse_url = staticmethod(parse_url)

    def __init__(self, settings: RabbitSettings) -> None:
        super().__init__(settings)
        if not settings.store:
            self.capabilities = type(self).capabilities - {C.STORE}
        self.link = Link(settings, self._forget_connection)
        self.link.on_lost = self._channel_lost
        self._losses: Callable[[Sequence[Any], str], None] | None = None
        self.schema = RabbitSchema(self.link)
        self._store = RabbitStore(self.link, settings.store_exchange)
        self._exchange: AbstractExchange | None = None
        self._buffer: asyncio.Queue[Received] = asyncio.Queue()
        self._consuming: UnderlayChannel | None = None  # aiormq's: see received.py
        self._consumer_tag: str | None = None
        self._acks: ChannelAcks | None = None  # the consuming channel's
        self._handed_out: dict[int, Received] = {}  # received, maybe unsettled
        self._starting: asyncio.Future[None] | None = None
        self._unbound_warned = False
        # Publishes of one deduplication id on this connection go one at a time: a return
        # is matched to its publish by message id, which the id's publishes share.
        self._same_id: dict[str, tuple[asyncio.Lock, list[None]]] = {}

    @property
    def node(self) -> str | None:
        return self.link.node if len(self.settings.connection_urls) > 1 else None

    max_body_size_option = "max_job_size"

    @property
    def max_body_size(self) -> int:
        return self.settings.max_job_size

    @property
    def visibility_timeout(self) -> float:
        return _CONSUMER_TIMEOUT

    def watch_losses(self, lost: Callable[[Sequence[Any], str], None] | None) -> None:
        """Told at once when the channel deliveries came on closes (a dropped
        connection, a broker closing it): RabbitMQ delivers them again at once."""
        self._losses = lost

    def _channel_lost(self, why: str) -> None:
        held = [m for m in self._handed_out.values() if not self._acked(m)]
        if held and self._losses is not None:
            self._losses(held, why)

    def _forget_connection(self) -> None:
        """What was declared or consumed on a connection goes with it."""
        if self._starting is not None:
            self._starting.cancel()
        self._exchange = self._consuming = self._starting = self._consumer_tag = None
        self._acks = None
        self._buffer = asyncio.Queue()
        self._handed_out = {}  # the channel they arrived on is gone
        self._store.reset()

    async def connect(self) -> None:
        await self.link.open()

    async def close(self) -> None:
        await self._release_buffer()
        await self.link.close()

    @property
    def store(self) -> StoreProtocol:
        return self._store if self.settings.store else super().store

    async def _release_buffer(self) -> None:
        """Stop consuming and release what this consumer still holds, handed out or not:
        closing the channel would return it too, but a quorum queue counts that as a
        delivery."""
        channel, tag = self._consuming, self._consumer_tag
        held, self._handed_out = list(self._handed_out.values()), {}
        if channel is None or tag is None:
            return
        try:
            await channel.basic_cancel(tag)
            while not self._buffer.empty():
                held.append(self._buffer.get_nowait())
            for msg in held:
                if not self._acked(msg):
                    await self.release(Delivery(msg.body, wire.attempt(msg.headers), msg))
        except (BrokerError, *AMQP_ERRORS) as exc:
            log.debug("could not release buffered deliveries (%s): the channel returns them", exc)

    # -- schema ------------------------------------------------------------------------

    async def plan_schema(self) -> SchemaPlan:
        return await self.schema.plan()

    async def _apply_schema(self, plan: SchemaPlan) -> None:
        await self.schema.apply(plan)

    # -- publishing --------------------------------------------------------------------

    async def _exchange_ready(self) -> AbstractExchange:
        """The exchange, with the jobs queue bound to it (once per connection)."""
        if self._exchange is None:
            self._exchange = await publishing.bound_exchange(
                self.link, self.settings, self._warn_unbound
            )
        return self._exchange

    def _warn_unbound(self, reason: str) -> None:
        if not self._unbound_warned:
            self._unbound_warned = True
            log.warning(
                "amqp: cannot bind %s to %s before publishing (%s); a job that no binding "
                "takes would be counted as a duplicate: keep the topology in place with "
                "`m sync-schema` run by a user with configure permission",
                self.settings.jobs,
                self.settings.exchange,
                reason,
            )

    def _prepare(self, message: JobMessage) -> JobMessage:
        return wire.with_derived_id(message)

    async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
        dedup = message.deduplication_id
        if dedup is None:
            return await self._publish_now(message, body)
        lock, users = self._same_id.setdefault(dedup, (asyncio.Lock(), []))
        users.append(None)
        try:
            async with lock:
                return await self._publish_now(message, body)
        finally:
            users.pop()
            if not users:
                del self._same_id[dedup]

    async def _publish_now(self, message: JobMessage, body: bytes) -> PublishResult:
        await self.link.ensure_open()
        exchange = self._exchange or await self._exchange_ready()
        return await publishing.publish_job(exchange, self.settings, message, body)

    async def requeue(self, body: bytes) -> None:
        await self.link.ensure_open()
        await self._publish_to(aio_pika.Message(body), self.settings.jobs)

    async def _publish_to(self, message: aio_pika.Message, queue: str) -> None:
        await publishing.publish_to(self.link, message, queue)

    # -- consuming ---------------------------------------------------------------------

    async def receive(self, max_messages: int, timeout: float) -> Sequence[Delivery]:
        await self.link.ensure_open()
        if self._consuming is None:
            # Shielded: a receive cancelled mid-RPC would leave the channel unusable.
            if self._starting is None or self._starting.done():
                self._starting = asyncio.ensure_future(self._consume())
                self._starting.add_done_callback(_retrieved)
            await asyncio.shield(self._starting)
        out: list[Received] = []
        deadline = time.monotonic() + timeout
        while not out:
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    out.append(await self._buffer.get())
            except TimeoutError:
                return []
            while len(out) < max_messages and not self._buffer.empty():
                out.append(self._buffer.get_nowait())
            out = [m for m in out if not await self._sent_round(m)]
        for msg in [m for m in self._handed_out.values() if self._acked(m)]:
            del self._handed_out[id(msg)]  # settled since: forget
        self._handed_out.update((id(m), m) for m in out)
        return [_delivery(m) for m in out]

    async def _consume(self) -> None:
        try:
            channel = await self.link.channel().get_underlay_channel()
            acks, buffer = ChannelAcks(channel), self._buffer

            async def delivered(message: DeliveredMessage) -> None:
                msg = Received(message)
                acks.delivered(msg)
                buffer.put_nowait(msg)

            self._acks = acks
            ok = await channel.basic_consume(self.settings.jobs, delivered)
            self._consumer_tag = ok.consumer_tag
        except aiormq.exceptions.ChannelNotFoundEntity:
            await self.link.reopen()
            raise BrokerError(
                f"queue {self.settings.jobs} does not exist: run schema sync (m sync-schema)"
            ) from None
        except AMQP_ERRORS as exc:
            raise BrokerError(f"cannot consume from {self.settings.jobs}: {exc}") from None
        self._consuming = channel

    async def _ack(self, delivery: Delivery) -> None:
        """Ack the delivery's message once; repeated calls do nothing."""
        msg = self._unsettled(delivery)
        if msg is not None:
            try:
                await self._ack_message(msg)
            except AMQP_ERRORS as exc:
                raise BrokerError(f"ack failed: {exc}") from None

    async def _ack_message(self, msg: Received) -> None:
        """Through the consuming channel's :class:`.ChannelAcks` when it is that one's."""
        acks = self._acks
        if acks is not None and acks.owns(msg):
            await acks.ack(msg)
        else:
            await msg.ack()

    def _acked(self, msg: Received) -> bool:
        acks = self._acks
        return msg.settled or (acks is not None and acks.owns(msg) and acks.acked(msg))

    def _unsettled(self, delivery: Delivery) -> Received | None:
        """The delivery's message while its channel is open; None once it was settled."""
        msg = delivery.handle
        if not isinstance(msg, Received):
            raise BrokerError("delivery was not received from this RabbitMQ broker")
        if self._acked(msg):
            return None
        if msg.closed:
            raise DeliveryLostError(
                "the channel it arrived on is closed; RabbitMQ delivers it again"
            )
        return msg

    async def ack(self, delivery: Delivery) -> None:
        await self._ack(delivery)

    async def release(self, delivery: Delivery) -> None:
        """A copy keeping the attempt count goes to the queue, then the delivery is acked:
        a quorum queue counts a requeue as a delivery."""
        msg = self._unsettled(delivery)
        if msg is None:
            return
        await self._publish_to(wire.released_copy(delivery), self.settings.jobs)
        await self._ack(delivery)

    async def retry(self, delivery: Delivery, delay: float) -> None:
        msg = self._unsettled(delivery)  # first: a lost delivery comes back by itself
        if msg is None:
            return
        name, ttl = self.settings.retry_queue(delay)
        await publishing.to_bucket(self.link, name, ttl, wire.retry_copy(delivery, msg.message_id))
        await self._ack(delivery)

    async def _sent_round(self, msg: Received) -> bool:
        """A delayed job that arrived early waits again in a bucket (:mod:`.delays`), or
        here when it is due within a few ms."""
        left = delays.left_ms(msg)
        if left <= delays.EARLY_MS:
            await delays.until_due(msg)
            return False
        name, ttl, copy = delays.hop(self.settings, msg, left)

        async def move() -> None:  # both or, on an error, neither: it comes back to try again
            await publishing.to_bucket(self.link, name, ttl, copy)
            await self._ack_message(msg)

        try:
            await asyncio.shield(move())  # a cancelled receive must not leave a second copy
        except (BrokerError, *AMQP_ERRORS) as exc:
            log.warning("a delayed job could not wait in %s: %s", name, exc)
        return True

    async def extend(self, delivery: Delivery) -> None:
        """RabbitMQ keeps an unacked delivery with its consumer until the channel closes."""
        self._unsettled(delivery)

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        if self._unsettled(delivery) is None:
            return
        await self._publish_to(wire.dead_copy(delivery, reason), self.settings.dead)
        await self._ack(delivery)

    async def dead_letters(self, limit: int = 100) -> Sequence[DeadLetter]:
        return await deadletters.latest(self.link, self.settings, limit)

    async def remove_dead_letters(self, letters: Sequence[DeadLetter]) -> int:
        return await deadletters.remove(self.link, self.settings, letters)

    async def queue_stats(self) -> QueueStats:
        """Passive declares (:mod:`.stats`); ``reserved`` None: AMQP counts no unacked."""
        return await stats.read(self.link)


def _retrieved(task: asyncio.Future[None]) -> None:
    """Mark a shielded task's outcome seen: whoever awaited it got the error already."""
    if not task.cancelled():
        task.exception()


def _delivery(msg: Received) -> Delivery:
    """``msg`` as a Delivery; a first delivery says when it arrived, by which RabbitMQ had
    stored it (it cannot say when it did: a quorum queue stores a message only once a
    majority has it, which an outage can delay past the message's deadline)."""
    attempt = wire.attempt(msg.headers)
    return Delivery(msg.body, attempt, msg, stored_by=msg.arrived if attempt == 1 else None)

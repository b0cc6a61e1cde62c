"""Publishing: jobs through the deduplication exchange (and what its answers mean), copies
straight to a queue, retries and delayed jobs to their bucket."""

from __future__ import annotations

from collections.abc import Callable

import aio_pika
import aiormq
from aio_pika.abc import AbstractExchange
from aio_pika.exceptions import DeliveryError, PublishError

from framework_m_core.ports import BrokerError, JobMessage, PublishResult

from . import wire
from .connection import AMQP_ERRORS, Link
from .settings import RabbitSettings


async def bound_exchange(
    link: Link, s: RabbitSettings, unbound: Callable[[str], None]
) -> AbstractExchange:
    """The exchange, with the jobs queue bound to it again (idempotent).

    A duplicate and a message that no binding takes both come back as a return;
    binding before the first publish keeps the second case from passing for the
    first and losing a job silently. A user that may not bind gets ``unbound(why)``.
    """
    channel = link.channel()
    try:
        exchange = await channel.get_exchange(s.exchange)
        await (await channel.get_queue(s.jobs)).bind(exchange)
    except aiormq.exceptions.ChannelNotFoundEntity as exc:
        await link.reopen()
        raise BrokerError(
            f"{exc.args[0] if exc.args else exc}: run schema sync (m sync-schema)"
        ) from None
    except aiormq.exceptions.ChannelAccessRefused as exc:
        # A producer without configure permission: publish without the guarantee.
        await link.reopen()
        unbound(str(exc))
        exchange = await link.channel().get_exchange(s.exchange)
    except aiormq.exceptions.AMQPError as exc:
        await link.reopen()
        raise BrokerError(f"cannot use exchange {s.exchange}: {exc}") from None
    return exchange


async def publish_job(
    exchange: AbstractExchange, s: RabbitSettings, message: JobMessage, body: bytes
) -> PublishResult:
    """Publish confirmed and mandatory: a return is a duplicate (a job with a dedup id)
    or a missing binding (one without); a nack is a refusal."""
    try:
        await exchange.publish(wire.job(message, body), routing_key="", mandatory=True)
    except PublishError:  # basic.return: routed nowhere
        if message.deduplication_id is None:
            raise BrokerError(
                f"exchange {s.exchange} routed a job nowhere: is the queue bound? "
                "run `m sync-schema`"
            ) from None
        return PublishResult(message.id, duplicate=True)
    except DeliveryError as exc:  # basic.nack: the broker did not take it
        raise BrokerError(f"the broker refused the job (basic.nack): {exc}") from None
    except AMQP_ERRORS as exc:
        raise BrokerError(f"publish failed: {exc}") from None
    return PublishResult(message.id)


class NoSuchQueue(BrokerError):
    """A mandatory publish to a queue that does not exist came back."""


async def publish_to(link: Link, message: aio_pika.Message, queue: str) -> None:
    """Publish to ``queue`` (confirmed, mandatory); raise BrokerError unless it is there."""
    try:
        await link.channel().default_exchange.publish(message, routing_key=queue, mandatory=True)
    except PublishError:
        raise NoSuchQueue(f"queue {queue} does not exist: run `m sync-schema`") from None
    except AMQP_ERRORS as exc:
        raise BrokerError(f"publish to {queue} failed: {exc}") from None


async def to_bucket(link: Link, name: str, ttl: int, copy: aio_pika.Message) -> None:
    """Publish ``copy`` to the retry bucket ``name``; declare the bucket only when it went
    missing (schema sync declares them all: declaring needs the configure permission)."""
    try:
        await publish_to(link, copy, name)
    except NoSuchQueue:
        arguments = link.settings.retry_args(ttl)
        refused = await link.probe(
            lambda ch: ch.declare_queue(name, durable=True, arguments=arguments)
        )
        if refused is not None:
            raise BrokerError(f"cannot declare retry queue {name}: {refused}") from None
        await publish_to(link, copy, name)

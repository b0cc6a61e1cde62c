"""Shared state on RabbitMQ: one durable queue per key holding its record, under a lock.

Record ``key`` is the one persistent message of the durable queue
``{queue}.state.{digest}``, with its version in the header ``x-fm-version``. RabbitMQ
has no compare-and-set, so each read and write holds the key's lock: the exclusive
queue ``{queue}.state.{digest}.lock``, which one connection declares at a time
(another connection's declare is refused with RESOURCE_LOCKED) and which goes with a
killed holder's connection. Under the lock a read takes the message unacknowledged
and puts it back; a write takes it, compares versions, publishes the new record with
a publisher confirm and acknowledges the old one. A write that died between the two
leaves both; the next one keeps the greater version and drops the other.

When a record is created its queue's name and key go, once, to ``{queue}.state.index``,
so that whatever drops (or lists) every record finds them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

from framework_m_core.ports import BrokerError, StateEntry

from .connection import AMQP_ERRORS, Link
from .settings import RabbitSettings

VERSION = "x-fm-version"
KEY = "x-fm-key"
LOCK_WAIT = 10.0  # seconds a call waits for a key's lock before it gives up
_LOCK_EXPIRES_MS = 60_000  # a lock queue its holder could not delete goes after this
_MAX_RECORDS = 16  # messages a read looks at in one record queue (normally one)


def record_queue(prefix: str, key: str) -> str:
    return f"{prefix}.{hashlib.sha256(key.encode()).hexdigest()[:32]}"


def index_queue(s: RabbitSettings) -> str:
    return f"{s.queue}.state.index"


class State:
    """The state calls of one broker, on its connection."""

    def __init__(self, settings: RabbitSettings, link: Link) -> None:
        self.settings = settings
        self.link = link
        self.prefix = f"{settings.queue}.state"
        self._local: dict[str, asyncio.Lock] = {}  # one call per key on this connection

    async def read(self, key: str) -> StateEntry | None:
        queue = record_queue(self.prefix, key)
        async with self._locked(key, queue):
            channel = await self.link.side_channel()
            try:
                current = await self._record(channel, queue)
                if current is None:
                    return None
                entry = StateEntry(current.body, _version(current))
                await current.reject(requeue=True)
                return entry
            except AMQP_ERRORS as exc:
                raise BrokerError(f"reading state {key!r}: {exc}") from None
            finally:
                await _close(channel)

    async def write(self, key: str, value: bytes, version: int | None) -> int | None:
        queue = record_queue(self.prefix, key)
        async with self._locked(key, queue):
            channel = await self.link.side_channel()
            try:
                current = await self._record(channel, queue)
                if current is None and version is not None:
                    return None
                if current is not None and (version is None or _version(current) != version):
                    await current.reject(requeue=True)
                    return None
                new = 1 if current is None else _version(current) + 1
                if current is None:
                    await self._create(key, queue)
                await self.link.channel().default_exchange.publish(
                    aio_pika.Message(
                        value,
                        headers={VERSION: new},
                        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                    ),
                    routing_key=queue,
                    mandatory=True,
                )
                if current is not None:
                    await current.ack()
                return new
            except AMQP_ERRORS as exc:
                raise BrokerError(f"writing state {key!r}: {exc}") from None
            finally:
                await _close(channel)

    async def _record(self, channel: AbstractChannel, queue: str) -> AbstractIncomingMessage | None:
        """The record, held unacknowledged; None when there is none. Records of a lesser
        version (left by a write that died) are dropped."""
        try:
            q = await channel.declare_queue(queue, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:  # closes the channel
            return None
        seen: list[AbstractIncomingMessage] = []
        while len(seen) < _MAX_RECORDS:
            message = await q.get(no_ack=False, fail=False)
            if message is None:
                break
            seen.append(message)
        if not seen:
            return None
        seen.sort(key=_version)
        for stale in seen[:-1]:
            await stale.ack()
        return seen[-1]

    async def _create(self, key: str, queue: str) -> None:
        """Declare the new record's queue and list it in the index (once: under the
        key's lock)."""
        index = index_queue(self.settings)
        channel = await self.link.side_channel()
        try:
            await channel.declare_queue(queue, durable=True)
            await channel.declare_queue(index, durable=True)
        except aiormq.exceptions.ChannelPreconditionFailed as exc:
            raise BrokerError(f"state queue {queue} or {index} exists otherwise: {exc}") from None
        finally:
            await _close(channel)
        await self.link.channel().default_exchange.publish(
            aio_pika.Message(
                queue.encode(),
                headers={KEY: key},
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            ),
            routing_key=index,
            mandatory=True,
        )

    @asynccontextmanager
    async def _locked(self, key: str, queue: str) -> AsyncIterator[None]:
        local = self._local.setdefault(key, asyncio.Lock())
        async with local:
            lock = f"{queue}.lock"
            await self._take(key, lock)
            try:
                yield
            finally:
                try:
                    channel = await self.link.side_channel()
                    try:
                        await channel.queue_delete(lock)
                    finally:
                        await _close(channel)
                except (BrokerError, *AMQP_ERRORS):
                    pass  # it goes with the connection, or after x-expires

    async def _take(self, key: str, lock: str) -> None:
        """Declare the lock queue, waiting while another connection holds it."""
        await self.link.ensure_open()
        deadline = time.monotonic() + LOCK_WAIT
        pause = 0.005
        while True:
            channel = await self.link.side_channel()
            try:
                await channel.declare_queue(
                    lock,
                    exclusive=True,
                    durable=False,
                    auto_delete=False,
                    arguments={"x-expires": _LOCK_EXPIRES_MS},
                )
                return
            except aiormq.exceptions.ChannelLockedResource:
                pass
            except AMQP_ERRORS as exc:
                raise BrokerError(f"locking state {key!r}: {exc}") from None
            finally:
                await _close(channel)
            if time.monotonic() + pause > deadline:
                raise BrokerError(f"state {key!r} stayed locked by another connection")
            await asyncio.sleep(random.uniform(pause, 2 * pause))
            pause = min(pause * 2, 0.1)


def _version(message: AbstractIncomingMessage) -> int:
    value = (message.headers or {}).get(VERSION)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


async def _close(channel: AbstractChannel) -> None:
    if not channel.is_closed:
        with contextlib.suppress(*AMQP_ERRORS):
            await channel.close()

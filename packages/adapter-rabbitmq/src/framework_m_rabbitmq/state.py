"""Shared state on RabbitMQ: one durable queue per key holding its record, under a lock.

Record ``key`` is the one persistent message of the durable queue
``{queue}.state.{digest}``, with its version in the header ``x-fm-version``. RabbitMQ
has no compare-and-set, so each write holds the key's lock: the exclusive queue
``{queue}.state.{digest}.lock``, which one connection declares at a time (another
connection's declare is refused with RESOURCE_LOCKED) and which goes with a killed
holder's connection. Under the lock a write takes the record unacknowledged,
compares versions, publishes the new record with a publisher confirm and then
acknowledges the old one, so the queue is never left empty. A read takes no lock: it
takes the record unacknowledged and puts it back at once; a record queue found empty
is held by another reader or a writer for a moment, and is read again. A write that
died between its publish and its ack leaves both records; readers take the greater
version, and the next write drops the other.

Before a record's queue is declared its name and key go to ``{queue}.state.index``, so
that whatever drops every record finds them.
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
HELD_WAIT = 2.0  # seconds an empty record queue is read again before it counts as empty
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
        await self.link.ensure_open()
        channel = await self.link.side_channel()
        try:
            held = await self._held(channel, queue)
            if not held:
                return None
            current = held[-1]
            entry = StateEntry(current.body, _version(current))
            for message in held:
                await message.reject(requeue=True)
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
        """Under the lock: the record, held unacknowledged; None when there is none.
        Records of a lesser version (left by a write that died) are dropped."""
        held = await self._held(channel, queue)
        if not held:
            return None
        for stale in held[:-1]:
            await stale.ack()
        return held[-1]

    async def _held(self, channel: AbstractChannel, queue: str) -> list[AbstractIncomingMessage]:
        """Every record in ``queue``, held unacknowledged, by version (greatest last);
        none when the queue is missing, or stays empty for :data:`HELD_WAIT` seconds (a
        record another reader or a writer holds comes back within a round trip)."""
        try:
            q = await channel.declare_queue(queue, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:  # closes the channel
            return []
        deadline = time.monotonic() + HELD_WAIT
        pause = 0.002
        while True:
            seen: list[AbstractIncomingMessage] = []
            while len(seen) < _MAX_RECORDS:
                message = await q.get(no_ack=False, fail=False)
                if message is None:
                    break
                seen.append(message)
            if seen or time.monotonic() + pause > deadline:
                return sorted(seen, key=_version)
            await asyncio.sleep(random.uniform(pause, 2 * pause))
            pause = min(pause * 2, 0.05)

    async def _create(self, key: str, queue: str) -> None:
        """List the new record's queue in the index, then declare it (under the key's
        lock): a write that dies in between leaves an entry for a queue that does not
        exist, which a drop deletes harmlessly, never a queue no drop finds."""
        index = index_queue(self.settings)
        channel = await self.link.side_channel()
        try:
            await channel.declare_queue(index, durable=True)
            await self.link.channel().default_exchange.publish(
                aio_pika.Message(
                    queue.encode(),
                    headers={KEY: key},
                    delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                ),
                routing_key=index,
                mandatory=True,
            )
            await channel.declare_queue(queue, durable=True)
        except aiormq.exceptions.ChannelPreconditionFailed as exc:
            raise BrokerError(f"state queue {queue} or {index} exists otherwise: {exc}") from None
        finally:
            await _close(channel)

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

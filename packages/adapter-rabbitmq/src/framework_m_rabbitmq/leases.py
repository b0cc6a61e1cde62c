"""Leases on RabbitMQ: exclusive queues, which belong to one connection and go with it.

Place ``i`` of a lease key is the exclusive queue ``{queue}.lease.{digest}.{i}`` with
``x-expires`` set to the lease's ttl. Declaring it takes the place (another connection's
declare is refused with RESOURCE_LOCKED); declaring it again renews it, since RabbitMQ
deletes a queue nobody used for ``x-expires``; deleting it releases it; and it is gone
the moment its connection closes, so a killed holder frees its places at once.

The queue says which connection holds a place, not which holder: this module keeps the
holders of its own connection, and puts each holder's name as the one message of
``{place}.holder`` (``x-max-length`` 1), where :meth:`Leases.holders` reads it from
any other connection.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel

from framework_m_core.ports import BrokerError

from .connection import AMQP_ERRORS, Link
from .settings import RabbitSettings

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def _one_at_a_time(method: F) -> F:
    """Lease calls of one connection in turn: holders on one connection share its
    queues, so RabbitMQ's exclusivity cannot tell them apart."""

    @functools.wraps(method)
    async def serialized(self: Leases, *args: Any) -> Any:
        async with self._turn:
            return await method(self, *args)

    return serialized  # type: ignore[return-value]


@dataclass(slots=True)
class _Place:
    key: str
    holder: str
    ttl_ms: int
    until: float  # monotonic; taken before the declare went out, so never later than RabbitMQ's


def place_queues(prefix: str, key: str, limit: int) -> list[str]:
    """The queues of the ``limit`` places of lease ``key``."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    return [f"{prefix}.{digest}.{i}" for i in range(limit)]


def _margin(ttl_ms: int) -> float:
    """How long before its expiry a place counts as gone: a renewal sent later might reach
    RabbitMQ after it deleted the queue, and would declare it anew."""
    return min(ttl_ms / 10_000, 0.5)


class Leases:
    """The lease calls of one broker, on its connection."""

    def __init__(self, settings: RabbitSettings, link: Link) -> None:
        self.link = link
        self.prefix = f"{settings.queue}.lease"
        self._mine: dict[str, _Place] = {}  # place queue -> the holder on this connection
        self._turn = asyncio.Lock()
        self._kept: AbstractChannel | None = None

    def reset(self) -> None:
        """The connection is gone, and every place it held with it."""
        self._mine.clear()
        self._kept = None

    async def _steady(self) -> AbstractChannel:
        """The channel for calls RabbitMQ does not refuse (deletes, name messages): kept
        open between calls, unlike the side channels a refusal closes."""
        if self._kept is None or self._kept.is_closed:
            self._kept = await self._channel()
        return self._kept

    def _queues(self, key: str, limit: int) -> list[str]:
        return place_queues(self.prefix, key, limit)

    def _live(self, queue: str) -> _Place | None:
        place = self._mine.get(queue)
        if place is None or time.monotonic() >= place.until - _margin(place.ttl_ms):
            return None
        return place

    def _find(self, key: str, holder: str) -> tuple[str, _Place] | None:
        """The place ``holder`` holds (or held) under ``key`` on this connection."""
        for queue, place in self._mine.items():
            if place.key == key and place.holder == holder:
                return queue, place
        return None

    async def _channel(self) -> AbstractChannel:
        await self.link.ensure_open()
        return await self.link.side_channel()

    async def _declare(self, queue: str, ttl_ms: int, *, passive: bool = False) -> str:
        """Declare the place queue: "ok", "locked" (another connection's), "missing"
        (passive only) or "other-ttl" (ours, declared with another x-expires)."""
        channel = await self._channel()
        try:
            await channel.declare_queue(
                queue,
                passive=passive,
                exclusive=True,
                durable=False,
                auto_delete=False,
                arguments=None if passive else {"x-expires": ttl_ms},
            )
            return "ok"
        except aiormq.exceptions.ChannelLockedResource:
            return "locked"
        except aiormq.exceptions.ChannelNotFoundEntity:
            return "missing"
        except aiormq.exceptions.ChannelPreconditionFailed:
            return "other-ttl"
        except AMQP_ERRORS as exc:
            raise BrokerError(f"lease queue {queue}: {exc}") from None
        finally:
            if not channel.is_closed:
                await channel.close()

    async def _delete(self, *queues: str) -> None:
        channel = await self._steady()
        try:
            for queue in queues:
                await channel.queue_delete(queue)
        except AMQP_ERRORS as exc:
            raise BrokerError(f"deleting lease queue {queues[0]}: {exc}") from None

    async def _name(self, queue: str, holder: str, ttl_ms: int) -> None:
        """Put ``holder`` as the one message of the place's name queue (renewing it)."""
        for _ in range(2):
            channel = await self._steady()
            try:
                await channel.declare_queue(
                    f"{queue}.holder",
                    durable=False,
                    arguments={
                        "x-max-length": 1,
                        "x-overflow": "drop-head",
                        "x-expires": ttl_ms,
                    },
                )
                await channel.default_exchange.publish(
                    aio_pika.Message(holder.encode()), routing_key=f"{queue}.holder"
                )
                return
            except aiormq.exceptions.ChannelPreconditionFailed:
                await self._delete(f"{queue}.holder")  # left by a holder with another ttl
            except AMQP_ERRORS as exc:
                raise BrokerError(f"lease name queue of {queue}: {exc}") from None

    async def _take(self, queue: str, key: str, holder: str, ttl_ms: int) -> bool:
        for _ in range(2):
            sent = time.monotonic()
            state = await self._declare(queue, ttl_ms)
            if state == "locked":
                return False
            if state == "other-ttl":  # this connection's own, left with another ttl
                await self._delete(queue)
                continue
            self._mine[queue] = _Place(key, holder, ttl_ms, sent + ttl_ms / 1000)
            await self._name(queue, holder, ttl_ms)
            return True
        raise BrokerError(f"lease queue {queue} kept changing its x-expires")

    @_one_at_a_time
    async def acquire(self, key: str, holder: str, ttl: float, limit: int) -> bool:
        ttl_ms = max(1, round(ttl * 1000))
        found = self._find(key, holder)
        if found is not None:
            queue, _ = found
            if self._live(queue) is not None:
                return await self._take(queue, key, holder, ttl_ms)  # renewed
            del self._mine[queue]
        for queue in self._queues(key, limit):
            if self._live(queue) is not None:
                continue  # another holder on this connection has it
            if await self._take(queue, key, holder, ttl_ms):
                return True
        return False

    @_one_at_a_time
    async def extend(self, key: str, holder: str) -> bool:
        found = self._find(key, holder)
        if found is None:
            return False
        queue, place = found
        if self._live(queue) is None:
            del self._mine[queue]
            await self._delete(queue)  # expired: let RabbitMQ agree at once
            return False
        sent = time.monotonic()
        if await self._declare(queue, place.ttl_ms) != "ok":
            del self._mine[queue]
            return False
        place.until = sent + place.ttl_ms / 1000
        await self._name(queue, holder, place.ttl_ms)
        return True

    @_one_at_a_time
    async def release(self, key: str, holder: str) -> bool:
        found = self._find(key, holder)
        if found is None:
            return False
        queue, _ = found
        live = self._live(queue) is not None
        del self._mine[queue]
        await self._delete(queue, f"{queue}.holder")
        return live

    @_one_at_a_time
    async def release_all(self) -> None:
        """Before the connection closes: the places go with it, their name queues not."""
        queues, self._mine = list(self._mine), {}
        if queues:
            await self._delete(*queues, *(f"{q}.holder" for q in queues))

    @_one_at_a_time
    async def holders(self, key: str, limit: int) -> list[str]:
        out = []
        for queue in self._queues(key, limit):
            if queue in self._mine:
                place = self._live(queue)
                if place is not None:
                    out.append(place.holder)
                continue
            if await self._declare(queue, 0, passive=True) == "locked":
                out.append(await self._read_name(queue))
        return out

    async def _read_name(self, queue: str) -> str:
        channel = await self._channel()
        try:
            name_queue = await channel.declare_queue(f"{queue}.holder", passive=True)
            message = await name_queue.get(no_ack=False, fail=False)
            if message is None:
                return "unknown"
            await message.reject(requeue=True)
            return message.body.decode(errors="replace")
        except aiormq.exceptions.ChannelNotFoundEntity:
            return "unknown"
        except AMQP_ERRORS as exc:
            raise BrokerError(f"reading lease name queue of {queue}: {exc}") from None
        finally:
            if not channel.is_closed:
                await channel.close()

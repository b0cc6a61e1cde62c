"""One AMQP connection with its publisher-confirm channel, reopened when it drops."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection
from aio_pika.exceptions import ChannelInvalidStateError

from framework_m_core.ports import BrokerError, ConfigurationError

from . import greeting
from .settings import RabbitSettings

log = logging.getLogger("framework_m.rabbitmq")

# What aio-pika and aiormq raise when a connection or channel is gone or refused.
AMQP_ERRORS = (aiormq.exceptions.AMQPError, ConnectionError, ChannelInvalidStateError)


class _LostConnectionTraceback(logging.Filter):
    """aiormq logs a lost connection at WARNING with the socket error's traceback; Link
    says it in one line (``connection ... lost; reconnecting``) and then reconnects."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Cancelling cause reader exited abnormally")


class _LateReturn(logging.Filter):
    """A publish given up for want of a confirm (a cluster without quorum) can still come
    back later as a basic.return, which aiormq logs at ERROR with the whole message,
    kwargs included. Say instead, at INFO and without the body, that it was not stored."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != "Unhandled message %r returning" or not record.args:
            return True
        returned = record.args[0] if isinstance(record.args, tuple) else None
        frame = getattr(returned, "delivery", None)
        header = getattr(returned, "header", None)
        message_id = getattr(getattr(header, "properties", None), "message_id", None)
        record.name, record.levelno, record.levelname = log.name, logging.INFO, "INFO"
        record.msg = "amqp: message %s came back after its publish was given up: not stored (%s)"
        record.args = (message_id, getattr(frame, "reply_text", "returned"))
        return True


logging.getLogger("aiormq.connection").addFilter(_LostConnectionTraceback())
logging.getLogger("aiormq.channel").addFilter(_LateReturn())


class Link:
    """The connection and channel an adapter instance works on.

    ``on_reset`` runs whenever the connection is closed or replaced: whatever the
    adapter cached for it (declared queues, a consumer) is gone with it.
    """

    def __init__(self, settings: RabbitSettings, on_reset: Callable[[], None]) -> None:
        self.settings = settings
        self._on_reset = on_reset
        self._connection: AbstractConnection | None = None
        self._channel: AbstractChannel | None = None
        self._reopening = asyncio.Lock()  # one reconnect at a time, whoever notices first
        self._lost_at: float | None = None
        self._wanted = False  # between open() and close(): keep a connection up
        self.node: str | None = None  # host:port of the connection, for logs and m status
        #: Called with why when the channel closes while the connection is wanted.
        self.on_lost: Callable[[str], None] | None = None

    def channel(self) -> AbstractChannel:
        if self._channel is None:
            raise BrokerError(f"{self.settings.display_url} is not connected")
        return self._channel

    async def _connect(self) -> AbstractConnection:
        """A connection to the first of the URL's hosts that takes one, tried in order."""
        urls = self.settings.connection_urls or (self.settings.connection_url,)
        failures = []
        for url in urls:
            try:
                connection = await self._connect_to(url)
            except BrokerError as exc:
                if len(urls) == 1:
                    raise
                failures.append(f"{node_of(url)}: {exc}")
                continue
            if len(urls) > 1 and node_of(url) != self.node:
                log.info("amqp: connected to node %s", node_of(url))
            self.node = node_of(url)
            return connection
        raise BrokerError(
            f"cannot connect to any host of {self.settings.display_url}: {'; '.join(failures)}"
        )

    async def _connect_to(self, url: str) -> AbstractConnection:
        connecting = asyncio.ensure_future(
            aio_pika.connect(url, timeout=self.settings.connect_timeout)
        )
        try:
            await asyncio.wait({connecting}, timeout=greeting.AFTER)
            if not connecting.done() and (problem := await _not_amqp(url)) is not None:
                raise ConfigurationError(problem)
            return await connecting
        except (*AMQP_ERRORS, OSError) as exc:
            spoke_amqp = isinstance(exc, aiormq.exceptions.ProbableAuthenticationError)
            if not spoke_amqp and (problem := await _not_amqp(url, named=True)) is not None:
                raise ConfigurationError(problem) from None
            raise BrokerError(f"cannot connect to {self.settings.display_url}: {exc}") from None
        finally:
            if not connecting.done():
                connecting.cancel()
                with contextlib.suppress(BaseException):
                    await connecting

    async def open(self) -> None:
        self._wanted = True
        if self._connection is not None:
            return
        connection = await self._connect()
        try:
            channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
            await channel.set_qos(prefetch_count=self.settings.prefetch)
        except AMQP_ERRORS as exc:
            await connection.close()
            raise BrokerError(
                f"cannot open a channel on {self.settings.display_url}: {exc}"
            ) from None
        self._connection, self._channel = connection, channel
        channel.close_callbacks.add(self._channel_closed)

    def _channel_closed(self, channel: object, exc: BaseException | None) -> None:
        """The channel closed: unless this side closed it, what was delivered on it is
        the queue's again at once (the adapter is told through ``on_lost``)."""
        if self._wanted and channel is self._channel and self.on_lost is not None:
            self.on_lost(f"the channel it came on closed ({exc or 'no reason given'})")

    async def close(self) -> None:
        self._wanted = False
        await self._drop()

    async def _drop(self) -> None:
        connection, self._connection, self._channel = self._connection, None, None
        self._on_reset()
        if connection is not None:
            await connection.close()  # unacked deliveries return to the queue

    async def reopen(self) -> None:
        """Replace the connection (after the broker closed the channel on an error)."""
        async with self._reopening:
            await self._reopen_now()

    async def _reopen_now(self) -> None:
        with contextlib.suppress(*AMQP_ERRORS, OSError):
            await self._drop()  # the old connection may be gone already
        await self.open()

    def _is_open(self) -> bool:
        connection, channel = self._connection, self._channel
        alive = connection is not None and not connection.is_closed
        return alive and channel is not None and not channel.is_closed

    async def ensure_open(self) -> None:
        """Reconnect when the connection dropped; deliveries it held return to the queue."""
        if self._is_open():
            return
        if not self._wanted:
            raise BrokerError(f"{self.settings.display_url} is not connected")
        async with self._reopening:
            if self._is_open():  # another task reconnected while this one waited
                return
            if self._lost_at is None:
                log.warning(
                    "amqp: connection to %s (node %s) lost; reconnecting",
                    self.settings.display_url,
                    self.node,
                )
                self._lost_at = time.monotonic()
            await self._reopen_now()
        if self._lost_at is not None:
            down, self._lost_at = time.monotonic() - self._lost_at, None
            log.warning(
                "amqp: reconnected to %s (node %s) after %.1fs",
                self.settings.display_url,
                self.node,
                down,
            )

    async def side_channel(self) -> AbstractChannel:
        """A channel of its own, so that a refusal on it closes that one only."""
        if self._connection is None:
            raise BrokerError(f"{self.settings.display_url} is not connected")
        try:
            return await self._connection.channel()
        except AMQP_ERRORS as exc:
            raise BrokerError(
                f"cannot open a channel on {self.settings.display_url}: {exc}"
            ) from None

    async def probe(
        self, declare: Callable[[AbstractChannel], Awaitable[Any]]
    ) -> aiormq.exceptions.ChannelClosed | None:
        """Run a declaration on a side channel; return the server's refusal, if any."""
        channel = await self.side_channel()
        try:
            await declare(channel)
            return None
        except aiormq.exceptions.ChannelClosed as exc:
            return exc
        finally:
            if not channel.is_closed:
                await channel.close()

    async def probe_all(
        self, declares: list[Callable[[AbstractChannel], Awaitable[Any]]]
    ) -> list[aiormq.exceptions.ChannelClosed | None]:
        """Run declarations one after another on a side channel (a new one after each
        refusal, which closes it); return each one's refusal, if any."""
        out: list[aiormq.exceptions.ChannelClosed | None] = []
        channel: AbstractChannel | None = None
        try:
            for declare in declares:
                if channel is None or channel.is_closed:
                    channel = await self.side_channel()
                try:
                    await declare(channel)
                    out.append(None)
                except aiormq.exceptions.ChannelClosed as exc:
                    out.append(exc)
        finally:
            if channel is not None and not channel.is_closed:
                await channel.close()
        return out

    async def exchange_type_known(self, kind: str, arguments: dict[str, Any]) -> bool:
        """Declare and delete a probe exchange of type ``kind`` (with the ``arguments`` it
        needs) on a connection of its own: RabbitMQ answers an unknown type by closing the
        whole connection."""
        probe = f"{self.settings.exchange}.probe-{uuid.uuid4().hex[:8]}"
        connection = await self._connect()
        try:
            with _quiet("aiormq.connection"):  # it logs the expected close as an error
                channel = await connection.channel()
                exchange = await channel.declare_exchange(
                    probe, kind, auto_delete=True, arguments=arguments
                )
                await exchange.delete()
            return True
        except aiormq.exceptions.ChannelAccessRefused:
            return True  # cannot tell: declaring the real exchange will say what is wrong
        except AMQP_ERRORS as exc:
            if "exchange type" in str(exc):
                return False
            raise BrokerError(f"cannot probe exchange type {kind!r}: {exc}") from None
        finally:
            with contextlib.suppress(*AMQP_ERRORS, OSError):
                await connection.close()


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


def node_of(url: str) -> str:
    """``host:port`` of a one-host AMQP URL, its credentials left out."""
    parts = urlsplit(url)
    default = 5671 if parts.scheme == "amqps" else 5672
    return f"{parts.hostname or 'localhost'}:{parts.port or default}"


async def _not_amqp(url: str, *, named: bool = False) -> str | None:
    """Why the URL's host and port are no AMQP server, if they are not (amqps:// is not
    asked: its port speaks TLS first); ``named``: only when another server answered."""
    parts = urlsplit(url)
    if parts.scheme != "amqp" or not parts.hostname:
        return None
    return await greeting.problem(parts.hostname, parts.port or 5672, named=named)

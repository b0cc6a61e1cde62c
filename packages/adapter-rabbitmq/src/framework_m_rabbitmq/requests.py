"""Requests to an exchange of framework-m's plugin, answered by reply.

An exchange of the plugin routes nothing: a message published to it is a request, and
the plugin answers on the queue named by ``reply_to`` with the request's
``correlation_id``. Each connection has one channel for these with one exclusive,
server-named reply queue; answers find their caller by ``correlation_id``. An answer
that does not come within :data:`ANSWER_WAIT` seconds is a :class:`BrokerError` (a
write may have taken effect).
"""

from __future__ import annotations

import asyncio
import itertools

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractIncomingMessage

from framework_m_core.ports import BrokerError

from .connection import AMQP_ERRORS, Link

ANSWER_WAIT = 10.0


class Refused(BrokerError):
    """The plugin answered ``error``: it carried out nothing of the request."""


class _Line:
    """The request channel, its reply queue and the requests waiting for their answers."""

    def __init__(self, channel: AbstractChannel, exchange: AbstractExchange, reply_to: str):
        self.channel, self.exchange, self.reply_to = channel, exchange, reply_to
        self.waiting: dict[str, asyncio.Future[AbstractIncomingMessage]] = {}

    def answered(self, message: AbstractIncomingMessage) -> None:
        future = self.waiting.pop(message.correlation_id or "", None)
        if future is not None and not future.done():
            future.set_result(message)

    def fail(self, why: str) -> None:
        waiting, self.waiting = self.waiting, {}
        for future in waiting.values():
            if not future.done():
                future.set_exception(BrokerError(why))


class Requests:
    """Requests to the plugin exchange ``exchange`` of type ``kind`` on ``link``'s
    connection; the answer's header ``{prefix}-result`` says how it went (``error``:
    the reason is in ``{prefix}-error``)."""

    def __init__(self, link: Link, exchange: str, kind: str, prefix: str) -> None:
        self.link = link
        self.exchange, self.kind = exchange, kind
        self._result, self._error = f"{prefix}-result", f"{prefix}-error"
        self._line: _Line | None = None
        self._opening = asyncio.Lock()
        self._ids = itertools.count()

    def reset(self) -> None:
        """The connection is gone, and with it the channel and the reply queue."""
        line, self._line = self._line, None
        if line is not None:
            line.fail(f"the connection to {self.link.settings.display_url} closed")

    async def ask(self, body: bytes, what: str) -> tuple[str, bytes]:
        """Send one request; its answer's result and body. :class:`Refused` when the
        plugin answered ``error``."""
        line = self._line or await self._open()
        correlation = f"{next(self._ids)}"
        future = asyncio.get_running_loop().create_future()
        line.waiting[correlation] = future
        try:
            await line.exchange.publish(
                aio_pika.Message(
                    body,
                    reply_to=line.reply_to,
                    correlation_id=correlation,
                    delivery_mode=aio_pika.DeliveryMode.NOT_PERSISTENT,
                ),
                routing_key="",
            )
            async with asyncio.timeout(ANSWER_WAIT):
                answered = await future
        except TimeoutError:
            raise BrokerError(f"{what}: no answer within {ANSWER_WAIT:g}s") from None
        except AMQP_ERRORS as exc:
            self.reset()
            raise BrokerError(f"{what}: {exc}") from None
        finally:
            line.waiting.pop(correlation, None)
            if future.done() and not future.cancelled():
                future.exception()  # failed by a closing line while the publish failed too
        headers = answered.headers or {}
        result = headers.get(self._result)
        if result == "error":
            raise Refused(f"{what}: refused by the broker: {headers.get(self._error)}")
        return str(result), answered.body

    async def _open(self) -> _Line:
        async with self._opening:
            if self._line is not None:
                return self._line
            await self.link.ensure_open()
            channel = await self.link.side_channel()
            try:
                exchange = await channel.declare_exchange(self.exchange, self.kind, passive=True)
                reply = await channel.declare_queue(exclusive=True, auto_delete=True)
                line = _Line(channel, exchange, reply.name)

                async def on_answer(message: AbstractIncomingMessage) -> None:
                    line.answered(message)

                await reply.consume(on_answer, no_ack=True)
            except aiormq.exceptions.ChannelNotFoundEntity:
                raise BrokerError(
                    f"exchange {self.exchange} does not exist: run schema sync (m sync-schema)"
                ) from None
            except AMQP_ERRORS as exc:
                raise BrokerError(f"cannot open a channel to {self.exchange}: {exc}") from None
            channel.close_callbacks.add(lambda _ch, exc: self._closed(line, exc))
            self._line = line
            return line

    def _closed(self, line: _Line, exc: BaseException | None) -> None:
        if self._line is line:
            self._line = None
        line.fail(f"the channel to {self.exchange} closed: {exc}")

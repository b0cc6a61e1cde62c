"""Memos on RabbitMQ: requests to framework-m's ``x-fm-memos`` exchange, answered by reply.

The exchange ``{queue}.memos`` (plugin module ``rabbit_exchange_type_fm_memos``) keeps
the memos in a Mnesia table on every node and routes nothing: a request published to
it names the operation and the key in its headers, and the plugin answers on the
queue named by ``reply_to``. Each connection has one memo channel with one exclusive,
server-named reply queue; answers find their caller by ``correlation_id``. An answer
that does not come within :data:`ANSWER_WAIT` seconds is a :class:`BrokerError` (a
put may have taken effect).
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractIncomingMessage

from framework_m_core.ports import BrokerError

from .connection import AMQP_ERRORS, Link
from .settings import MEMO_EXCHANGE_TYPE, RabbitSettings

OP, KEY, TTL = "x-fm-memo-op", "x-fm-memo-key", "x-fm-memo-ttl"
RESULT, ERROR = "x-fm-memo-result", "x-fm-memo-error"
ANSWER_WAIT = 10.0


class _Line:
    """A memo channel, its reply queue and the requests waiting for their answers."""

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


class Memos:
    """The memo calls of one broker, on its connection."""

    def __init__(self, settings: RabbitSettings, link: Link) -> None:
        self.settings = settings
        self.link = link
        self._line: _Line | None = None
        self._opening: asyncio.Lock = asyncio.Lock()
        self._ids = itertools.count()

    def reset(self) -> None:
        """The connection is gone, and with it the channel and the reply queue."""
        line, self._line = self._line, None
        if line is not None:
            line.fail(f"the connection to {self.settings.display_url} closed")

    async def put(self, key: str, value: bytes, ttl: float, create: bool) -> bool:
        headers: dict[str, Any] = {
            OP: "create" if create else "put",
            KEY: key,
            TTL: max(1, round(ttl * 1000)),
        }
        result, _ = await self._ask(headers, value, f"memo {key!r}")
        return result == "stored"

    async def get(self, key: str) -> bytes | None:
        result, body = await self._ask({OP: "get", KEY: key}, b"", f"memo {key!r}")
        return body if result == "found" else None

    async def _ask(self, headers: dict[str, Any], body: bytes, what: str) -> tuple[str, bytes]:
        """Send one request; its answer's result and body."""
        line = self._line or await self._open()
        correlation = f"{next(self._ids)}"
        future = asyncio.get_running_loop().create_future()
        line.waiting[correlation] = future
        try:
            await line.exchange.publish(
                aio_pika.Message(
                    body,
                    headers=headers,
                    reply_to=line.reply_to,
                    correlation_id=correlation,
                    delivery_mode=aio_pika.DeliveryMode.NOT_PERSISTENT,
                ),
                routing_key="",
            )
            async with asyncio.timeout(ANSWER_WAIT):
                answer = await future
        except TimeoutError:
            raise BrokerError(f"{what}: no answer within {ANSWER_WAIT:g}s") from None
        except AMQP_ERRORS as exc:
            self.reset()
            raise BrokerError(f"{what}: {exc}") from None
        finally:
            line.waiting.pop(correlation, None)
            if future.done() and not future.cancelled():
                future.exception()  # failed by a closing line while the publish failed too
        result = (answer.headers or {}).get(RESULT)
        if result == "error":
            raise BrokerError(f"{what}: refused by the broker: {(answer.headers or {}).get(ERROR)}")
        return str(result), answer.body

    async def _open(self) -> _Line:
        async with self._opening:
            if self._line is not None:
                return self._line
            await self.link.ensure_open()
            channel = await self.link.side_channel()
            name = self.settings.memo_exchange
            try:
                exchange = await channel.declare_exchange(name, MEMO_EXCHANGE_TYPE, passive=True)
                reply = await channel.declare_queue(exclusive=True, auto_delete=True)
                line = _Line(channel, exchange, reply.name)
                await reply.consume(_answered(line), no_ack=True)
            except aiormq.exceptions.ChannelNotFoundEntity:
                raise BrokerError(
                    f"exchange {name} does not exist: run schema sync (m sync-schema)"
                ) from None
            except AMQP_ERRORS as exc:
                raise BrokerError(f"cannot open the memo channel: {exc}") from None
            channel.close_callbacks.add(lambda _ch, exc: self._closed(line, exc))
            self._line = line
            return line

    def _closed(self, line: _Line, exc: BaseException | None) -> None:
        if self._line is line:
            self._line = None
        line.fail(f"the memo channel closed: {exc}")


def _answered(line: _Line) -> Any:
    async def on_message(message: AbstractIncomingMessage) -> None:
        line.answered(message)

    return on_message

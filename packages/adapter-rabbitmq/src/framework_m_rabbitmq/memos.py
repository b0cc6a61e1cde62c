"""Memos on RabbitMQ: requests to framework-m's ``x-fm-memos`` exchange, answered by reply.

The exchange ``{queue}.memos`` (plugin module ``rabbit_exchange_type_fm_memos``) keeps
the memos in a Mnesia table on every node and routes nothing: a request published to
it names the operation and the key in its headers, and the plugin answers on the
queue named by ``reply_to``. Each connection has one memo channel with one exclusive,
server-named reply queue; answers find their caller by ``correlation_id``. An answer
that does not come within :data:`ANSWER_WAIT` seconds is a :class:`BrokerError` (a
put may have taken effect).

The calls made in one pass of the event loop (the statuses of the jobs ending in it)
go as one ``batch`` request, whose writes the plugin makes in one transaction: a
message and its answer cost far more on this path than the memo work. A plugin
older than the batch answers it with an error; the calls then go one by one, and
the adapter says once to update the plugin.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct
from typing import Any, NamedTuple

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractIncomingMessage

from framework_m_core.ports import BrokerError, Calls, PassBatch, answer

from .connection import AMQP_ERRORS, Link
from .settings import MEMO_EXCHANGE_TYPE, RabbitSettings

OP, KEY, TTL = "x-fm-memo-op", "x-fm-memo-key", "x-fm-memo-ttl"
RESULT, ERROR = "x-fm-memo-result", "x-fm-memo-error"
ANSWER_WAIT = 10.0
#: Calls in one batch request at most (the plugin takes up to 1,000).
BATCH_MOST = 500
_PUT, _CREATE, _GET = 1, 2, 3
_REQUEST = struct.Struct(">BH")
_SIZES = struct.Struct(">II")
_ANSWER = struct.Struct(">BI")
_ANSWERS = {1: "stored", 2: "refused", 3: "found", 4: "none"}

log = logging.getLogger("framework_m.rabbitmq")


class _Call(NamedTuple):
    op: int
    key: bytes
    ttl_ms: int
    value: bytes

    def headers(self) -> dict[str, Any]:
        if self.op == _GET:
            return {OP: "get", KEY: self.key.decode()}
        return {OP: "create" if self.op == _CREATE else "put", KEY: self.key.decode(),
                TTL: self.ttl_ms}  # fmt: skip


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
        self._calls: PassBatch[_Call, tuple[str, bytes]] = PassBatch(self._flush, BATCH_MOST)
        self._batches = True  # until a plugin without them says so

    def reset(self) -> None:
        """The connection is gone, and with it the channel and the reply queue."""
        line, self._line = self._line, None
        if line is not None:
            line.fail(f"the connection to {self.settings.display_url} closed")

    async def put(self, key: str, value: bytes, ttl: float, create: bool) -> bool:
        call = _Call(_CREATE if create else _PUT, key.encode(), max(1, round(ttl * 1000)), value)
        result, _ = await self._calls.submit(call)
        return result == "stored"

    async def get(self, key: str) -> bytes | None:
        result, body = await self._calls.submit(_Call(_GET, key.encode(), 0, b""))
        return body if result == "found" else None

    async def _flush(self, calls: Calls[_Call, tuple[str, bytes]]) -> None:
        if len(calls) > 1 and self._batches:
            try:
                answers = await self._batch([call for call, _ in calls])
            except _NoBatches:
                self._batches = False
                log.warning(
                    "%s: the memo exchange takes no batches: update framework-m's RabbitMQ "
                    "plugin (packages/adapter-rabbitmq/plugin/build.sh); memo calls go "
                    "one by one meanwhile",
                    self.settings.display_url,
                )
            else:
                for (_, future), got in zip(calls, answers, strict=True):
                    answer(future, got)
                return
        results = await asyncio.gather(
            *(self._ask(call.headers(), call.value, f"memo {call.key.decode()!r}")
              for call, _ in calls),
            return_exceptions=True,
        )  # fmt: skip
        for (_, future), result in zip(calls, results, strict=True):
            answer(future, result if not isinstance(result, BaseException) else _error(result))

    async def _batch(self, calls: list[_Call]) -> list[tuple[str, bytes]]:
        body = b"".join(
            _REQUEST.pack(c.op, len(c.key)) + c.key + _SIZES.pack(c.ttl_ms, len(c.value)) + c.value
            for c in calls
        )
        try:
            result, reply = await self._ask({OP: "batch"}, body, f"{len(calls)} memo calls")
        except _Refused as exc:
            if "must be put, create or get" in str(exc):
                raise _NoBatches from None
            raise
        if result != "batch":
            raise BrokerError(f"memo calls: the plugin answered {result!r} to a batch")
        return _answers(reply, len(calls))

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
        result = (answered.headers or {}).get(RESULT)
        if result == "error":
            why = (answered.headers or {}).get(ERROR)
            raise _Refused(f"{what}: refused by the broker: {why}")
        return str(result), answered.body

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


class _Refused(BrokerError):
    """The plugin answered ``error``."""


class _NoBatches(Exception):
    """The plugin is older than batches."""


def _error(exc: BaseException) -> Exception:
    return exc if isinstance(exc, Exception) else BrokerError(f"memo call: {exc!r}")


def _answers(reply: bytes, count: int) -> list[tuple[str, bytes]]:
    """A batch's answers, one per request; BrokerError when the reply is not that."""
    out: list[tuple[str, bytes]] = []
    at = 0
    try:
        while at < len(reply):
            code, size = _ANSWER.unpack_from(reply, at)
            at += _ANSWER.size
            value = reply[at : at + size]
            if len(value) != size or code not in _ANSWERS:
                raise ValueError(f"answer {len(out) + 1}")
            at += size
            out.append((_ANSWERS[code], value))
    except (struct.error, ValueError) as exc:
        raise BrokerError(f"memo calls: a malformed batch answer ({exc})") from None
    if len(out) != count:
        raise BrokerError(f"memo calls: {len(out)} answers to a batch of {count}")
    return out


def _answered(line: _Line) -> Any:
    async def on_message(message: AbstractIncomingMessage) -> None:
        line.answered(message)

    return on_message

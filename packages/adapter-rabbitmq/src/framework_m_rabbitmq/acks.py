"""The acks of one event-loop pass on the consuming channel, in as few frames as it allows.

aio-pika writes every ``basic.ack`` as a frame and a socket write of its own. When
the acks of one pass include the channel's oldest unacked deliveries, one
``basic.ack`` with ``multiple`` settles that whole run (AMQP: every outstanding
delivery up to and including its tag); the others go one by one. The run stops
at the first delivery not being acked in this pass (a job still running, one
still buffered), so a multiple ack never settles a job that did not finish.
"""

from __future__ import annotations

import asyncio

from aio_pika.abc import AbstractIncomingMessage
from aio_pika.exceptions import ChannelInvalidStateError

# Fewer than this at the head of the channel go one by one.
_RUN = 2


class ChannelAcks:
    """Acks for the deliveries of one consuming channel; a new channel gets a new one."""

    def __init__(self, channel: object) -> None:
        self._channel = channel  # aiormq's channel, as IncomingMessage.channel gives it
        self._unacked: dict[int, None] = {}  # delivery tags received, not acked yet
        self._waiting: list[tuple[AbstractIncomingMessage, asyncio.Future[None]]] = []
        self._sending: set[asyncio.Task[None]] = set()
        self._scheduled = False

    def delivered(self, msg: AbstractIncomingMessage) -> None:
        """Count ``msg`` as unacked: called for every delivery on the channel."""
        if msg.delivery_tag is not None:
            self._unacked[msg.delivery_tag] = None

    def owns(self, msg: AbstractIncomingMessage) -> bool:
        """Whether ``msg`` arrived on this channel, which is still open."""
        try:
            return msg.delivery_tag is not None and msg.channel is self._channel
        except ChannelInvalidStateError:
            return False

    def acked(self, msg: AbstractIncomingMessage) -> bool:
        """Whether ``msg``, one of this channel's, was acked (alone or by a multiple ack)."""
        return msg.processed or msg.delivery_tag not in self._unacked

    async def ack(self, msg: AbstractIncomingMessage) -> None:
        """Ack ``msg``, one of this channel's, with the others of this pass; raises what
        writing the ack raised."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((msg, future))
        if not self._scheduled:
            self._scheduled = True
            task = asyncio.create_task(self._flush())
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        await future

    async def _flush(self) -> None:
        self._scheduled = False
        batch, self._waiting = self._waiting, []
        waiting: dict[int, list[asyncio.Future[None]]] = {}
        acking: dict[int, AbstractIncomingMessage] = {}
        for msg, future in batch:
            tag = msg.delivery_tag or 0  # owns() let in only messages with a tag
            if self.acked(msg) and tag not in acking:  # acked before, or in flight now
                future.set_result(None)
                continue
            acking[tag] = msg
            waiting.setdefault(tag, []).append(future)
        run: list[int] = []
        for tag in sorted(self._unacked):
            if tag not in acking:
                break
            run.append(tag)
        for tag in acking:  # in flight: acking one again meanwhile does nothing
            del self._unacked[tag]
        sends = [(run, acking[run[-1]], True)] if len(run) >= _RUN else []
        covered = set(run) if sends else set()
        sends += [([tag], msg, False) for tag, msg in acking.items() if tag not in covered]
        for n, (tags, msg, multiple) in enumerate(sends):
            try:
                await msg.ack(multiple=multiple)
            except BaseException as exc:
                failure = exc if isinstance(exc, Exception) else ConnectionError("ack cancelled")
                for unsent, *_ in sends[n:]:
                    for tag in unsent:
                        self._unacked[tag] = None
                        _settle(waiting[tag], failure)
                if not isinstance(exc, Exception):
                    raise
                return
            for tag in tags:
                _settle(waiting[tag], None)


def _settle(futures: list[asyncio.Future[None]], failure: Exception | None) -> None:
    for future in futures:
        if future.done():  # its caller was cancelled
            continue
        if failure is None:
            future.set_result(None)
        else:
            future.set_exception(failure)

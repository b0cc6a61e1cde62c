"""The acks of one event-loop pass on the consuming channel, in as few frames as it allows.

Every ``basic.ack`` is a frame and a socket write of its own. When
the acks of one pass include the channel's oldest unacked deliveries, one
``basic.ack`` with ``multiple`` settles that whole run (AMQP: every outstanding
delivery up to and including its tag); the others go one by one. The run stops
at the first delivery not being acked in this pass (a job still running, one
still buffered), or at a delivery whose single ack another pass is still writing
(a multiple ack written first would settle it, and its own ack would then name a tag
the channel no longer has: RabbitMQ closes the channel over that). So a multiple ack
never settles a job that did not finish, nor one settled by an ack of its own.
"""

from __future__ import annotations

import asyncio

from aiormq.abc import AbstractChannel

from framework_m_core.ports import Calls, PassBatch, answer

from .received import Received

# Fewer than this at the head of the channel go one by one.
_RUN = 2

# One basic.ack to write: the delivery tags it settles, the message to ack, and
# whether it is a multiple ack (settling every outstanding tag up to the message's).
_Send = tuple[list[int], Received, bool]


class ChannelAcks:
    """Acks for the deliveries of one consuming channel; a new channel gets a new one."""

    def __init__(self, channel: AbstractChannel) -> None:
        self._channel = channel
        self._unacked: dict[int, None] = {}  # delivery tags received, not acked yet
        self._in_flight: set[int] = set()  # tags whose ack a flush is writing
        self._batch: PassBatch[Received, None] = PassBatch(self._flush)

    def delivered(self, msg: Received) -> None:
        """Count ``msg`` as unacked: called for every delivery on the channel."""
        if msg.delivery_tag is not None:
            self._unacked[msg.delivery_tag] = None

    def owns(self, msg: Received) -> bool:
        """Whether ``msg`` arrived on this channel, which is still open."""
        return msg.delivery_tag is not None and msg.channel is self._channel and not msg.closed

    def acked(self, msg: Received) -> bool:
        """Whether ``msg``, one of this channel's, was acked (alone or by a multiple ack)."""
        return msg.settled or msg.delivery_tag not in self._unacked

    async def ack(self, msg: Received) -> None:
        """Ack ``msg``, one of this channel's, with the others of this pass; raises what
        writing the ack raised."""
        await self._batch.submit(msg)

    async def _flush(self, calls: Calls[Received, None]) -> None:
        acking, waiting = self._to_ack(calls)
        sends = self._sends(acking)
        for n, (tags, msg, multiple) in enumerate(sends):
            try:
                await msg.ack(multiple=multiple)
            except BaseException:
                for unsent, *_ in sends[n:]:  # still unacked; their callers get the error
                    self._unacked.update(dict.fromkeys(unsent))
                    self._in_flight.difference_update(unsent)
                raise
            self._in_flight.difference_update(tags)
            for tag in tags:
                for future in waiting[tag]:
                    answer(future, None)

    def _to_ack(
        self, calls: Calls[Received, None]
    ) -> tuple[dict[int, Received], dict[int, list[asyncio.Future[None]]]]:
        """The messages of ``calls`` still to ack and the futures waiting on each, by
        delivery tag; the calls for messages already acked are answered now."""
        waiting: dict[int, list[asyncio.Future[None]]] = {}
        acking: dict[int, Received] = {}
        for msg, future in calls:
            tag = msg.delivery_tag or 0  # owns() let in only messages with a tag
            if self.acked(msg):  # acked before, or in flight now
                answer(future, None)
                continue
            acking[tag] = msg
            waiting.setdefault(tag, []).append(future)
        return acking, waiting

    def _sends(self, acking: dict[int, Received]) -> list[_Send]:
        """The acks to write for ``acking``: one with ``multiple`` for the run at the
        channel's head when it is long enough, then the others one by one. Counts them
        all as in flight (no longer unacked)."""
        run = self._head_run(acking)
        for tag in acking:  # in flight: acking one again meanwhile does nothing
            del self._unacked[tag]
            self._in_flight.add(tag)
        sends: list[_Send] = [(run, acking[run[-1]], True)] if len(run) >= _RUN else []
        covered = set(run) if sends else set()
        sends += [([tag], msg, False) for tag, msg in acking.items() if tag not in covered]
        return sends

    def _head_run(self, acking: dict[int, Received]) -> list[int]:
        """The channel's oldest outstanding tags, up to the first one not in ``acking``
        (one still unacked, or one whose ack another flush is writing)."""
        run: list[int] = []
        for tag in sorted(self._unacked.keys() | self._in_flight):
            if tag not in acking:
                break
            run.append(tag)
        return run

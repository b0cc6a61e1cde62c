"""The dead-letter queue, read without consuming it and thinned by message id.

A queue has no random access: both operations fetch every message on a channel of
their own, ack what they take and put back, in order, what they leave.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aio_pika.abc import AbstractIncomingMessage

from framework_m_core.ports import BrokerError, DeadLetter

from . import wire
from .connection import AMQP_ERRORS, Link
from .settings import RabbitSettings


async def latest(link: Link, s: RabbitSettings, limit: int) -> list[DeadLetter]:
    """The ``limit`` latest dead letters, oldest first; the queue is left as it was."""
    if limit < 1:
        return []
    kept, _ = await _sift(link, s, lambda m: False)
    return [wire.dead_letter(m, s.delivery_limit) for m in kept][-limit:]


async def remove(link: Link, s: RabbitSettings, letters: Sequence[DeadLetter]) -> int:
    """Ack the messages the letters name (by message id); how many were still there."""
    refs = {letter.ref for letter in letters if letter.ref is not None}
    if not refs:
        return 0
    _, taken = await _sift(link, s, lambda m: m.message_id in refs)
    return taken


async def _sift(
    link: Link, s: RabbitSettings, take: Callable[[AbstractIncomingMessage], bool]
) -> tuple[list[AbstractIncomingMessage], int]:
    """Fetch every dead letter; ack those ``take`` picks, put the rest back in order."""
    channel = await link.side_channel()
    try:
        queue = await channel.get_queue(s.dead)
        kept: list[AbstractIncomingMessage] = []
        taken = 0
        while (msg := await queue.get(no_ack=False, fail=False)) is not None:
            if take(msg):
                await msg.ack()
                taken += 1
            else:
                kept.append(msg)
        if kept:
            await kept[-1].nack(multiple=True, requeue=True)
        return kept, taken
    except AMQP_ERRORS as exc:
        raise BrokerError(f"cannot read {s.dead}: {exc}") from None
    finally:
        if not channel.is_closed:
            await channel.close()

"""Delayed jobs on RabbitMQ, held in the retry buckets until due.

A delayed job is published like any other, through the deduplication exchange,
with its due time in ``x-fm-not-before``. A consumer that receives it early
hands it on to the largest retry bucket whose TTL does not pass the due time,
and acks it: the bucket's TTL sends it back to the jobs queue, hop by hop (an
hour at most each), until it arrives due. Hops are copies that keep the attempt
count, so waiting is never an attempt; they survive a broker restart like any
persistent message, and the dedup window applies to the first publish.
"""

from __future__ import annotations

import asyncio
import time

import aio_pika

from .received import Received
from .settings import RETRY_BUCKETS_MS, RabbitSettings
from .wire import ATTEMPTS_HEADER, NOT_BEFORE_HEADER, attempt

# A job due within this many ms is waited for by its consumer, not sent round again.
EARLY_MS = 20
_LATEST_MS = 253402300800 * 1000  # 10000-01-01: a header past it is not a due time


def due_ms(msg: Received) -> int | None:
    """When ``msg`` is due (unix ms), if it carries a sane due time; None otherwise (a
    hostile or missing header makes it due now rather than hop for ever)."""
    value = msg.headers.get(NOT_BEFORE_HEADER)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _LATEST_MS:
        return value
    return None


def left_ms(msg: Received) -> int:
    """The ms until ``msg`` is due: 0 once it is, or when it has no sane due time."""
    due = due_ms(msg)
    return 0 if due is None else max(0, due - int(time.time() * 1000))


async def until_due(msg: Received) -> None:
    """Wait until ``msg`` is due by this clock (a bucket's TTL may end a little early)."""
    left = left_ms(msg)  # whole ms from a truncated now: never short of the due time
    if left > 0:
        await asyncio.sleep(left / 1000)


def hop(s: RabbitSettings, msg: Received, left_ms: int) -> tuple[str, int, aio_pika.Message]:
    """The bucket queue (name, TTL) to wait ``left_ms`` in, and the copy to wait as."""
    fitting = [b for b in RETRY_BUCKETS_MS if b <= left_ms]
    ttl = fitting[-1] if fitting else RETRY_BUCKETS_MS[0]
    copy = aio_pika.Message(
        msg.body,
        headers={
            ATTEMPTS_HEADER: attempt(msg.headers) - 1,  # waiting is not an attempt
            NOT_BEFORE_HEADER: due_ms(msg),
        },
        message_id=msg.message_id,
        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        content_type=msg.content_type,
    )
    return f"{s.queue}.retry.{ttl}", ttl, copy

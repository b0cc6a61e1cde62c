"""``queue_stats()`` on RabbitMQ: passive declares of the queue's own queues.

A passive ``queue.declare`` changes nothing and answers with the queue's
``message_count`` and ``consumer_count``. The count leaves out every message
delivered and not yet acked, and RabbitMQ delivers ahead: up to ``prefetch``
messages per consumer that no worker asked for yet are out of ``ready`` too.

The jobs queue, the dead queue and every retry bucket (schema sync declares
them all) are declared one after another on one side channel: a call is the
channel's open and close and one round trip per queue (16). A queue that is
missing closes that channel only, and the call says to run ``m sync-schema``.

The retry buckets hold the retries waiting out their delay and the delayed jobs a
consumer handed on to wait there (:mod:`framework_m_rabbitmq.delays`), alike:
``scheduled`` counts both, and ``delayed`` and ``retries`` are None. A delayed job no
consumer received yet is in the jobs queue, among ``ready``.

AMQP has no count of unacknowledged messages, so ``reserved`` is None. The
management API has one, but samples it every few seconds
(``collect_statistics_interval``): it went on showing settled deliveries as
unacked for more than five seconds, longer than a count may trail.
"""

from __future__ import annotations

import aiormq

from framework_m_core.ports import BrokerError, QueueStats

from .connection import AMQP_ERRORS, Link


async def read(link: Link) -> QueueStats:
    """The counts now; BrokerError when the broker cannot answer or a queue is missing."""
    s = link.settings
    names = [s.jobs, s.dead, *(name for name, _ in s.retry_queues)]
    counts: list[tuple[int, int]] = []
    channel = await link.side_channel()
    try:
        for name in names:
            declared = await channel.declare_queue(name, passive=True)
            result = declared.declaration_result
            counts.append((result.message_count or 0, result.consumer_count or 0))
    except aiormq.exceptions.ChannelNotFoundEntity:
        raise BrokerError(
            f"queue {names[len(counts)]} does not exist: run `m sync-schema`"
        ) from None
    except AMQP_ERRORS as exc:
        raise BrokerError(f"cannot read the counts of {s.queue}: {exc}") from None
    finally:
        if not channel.is_closed:
            await channel.close()
    (ready, consumers), (dead, _), *retries = counts
    return QueueStats(
        ready=ready,
        reserved=None,
        scheduled=sum(waiting for waiting, _ in retries),
        dead_letters=dead,
        consumers=consumers,
    )

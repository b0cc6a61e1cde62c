"""``queue_stats()`` on NATS: the durable consumers' counts and the dead-letter stream's size.

Three JetStream API requests (consumer info of the jobs' consumer and of the delayed
jobs' one, then stream info of the dead-letter stream), all reads: nothing on the
server changes.

What JetStream can and cannot tell:

* ``num_pending`` counts the stream's messages past the consumer's delivered
  sequence that match its filter subject (the jobs subject). Dead letters are
  in a stream of their own, so they are never among them.
* ``num_ack_pending`` counts every delivery not yet acked or termed: the ones a
  worker holds, retries waiting out a ``nak(delay=...)``, and deliveries
  released (``nak()``) or past their ``ack_wait`` until they are delivered again.
  JetStream gives no separate count of any of these, so ``retries`` is None.
* ``scheduled`` and ``delayed`` count the jobs enqueued for later: the delayed jobs'
  consumer's pending messages and the ones it holds back (a ``nak(delay=...)`` until
  due). A job past its due time waits there too until a consuming worker moves it.
* A pull consumer keeps no count of the clients fetching from it
  (``num_waiting`` is pull requests waiting, not consumers), so ``consumers``
  is None.
"""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from framework_m_core.ports import BrokerError, QueueStats

from .errors import server_errors
from .settings import NatsSettings


async def read(js: JetStreamContext, s: NatsSettings) -> QueueStats:
    """The queue's counts by the server's numbers; BrokerError when it cannot answer."""
    with server_errors("reading queue stats"):
        try:
            consumer = await js.consumer_info(s.stream, s.consumer)
            later = await js.consumer_info(s.stream, s.delayed_consumer)
            dead = await js.stream_info(s.dead_letter_stream)
        except NotFoundError as exc:
            raise BrokerError(
                f"reading queue stats failed: {exc.description or 'not found'}: "
                "run schema sync (m sync-schema)"
            ) from None
    delayed = (later.num_pending or 0) + (later.num_ack_pending or 0)
    return QueueStats(
        ready=consumer.num_pending or 0,
        reserved=consumer.num_ack_pending or 0,
        scheduled=delayed,
        dead_letters=dead.state.messages or 0,
        consumers=None,
        delayed=delayed,
    )

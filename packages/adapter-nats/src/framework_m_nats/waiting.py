"""``waiting()`` on NATS: the stored messages no consumer was handed yet, read in place.

Two reads of the job stream, neither of which takes or acks anything:

* **due now**: the jobs subject's messages past the jobs consumer's delivered
  sequence, first in line first (the order the consumer hands them out). A delivery
  that was released or that waits out a retry's ``nak(delay=...)`` is behind that
  sequence and is not among them: JetStream keeps no list of those.
* **held until a time**: the delayed subject's messages past the delayed jobs'
  consumer's ack floor whose due time is still ahead, by due time. One past its due
  time is moved to the jobs subject (or is about to be) and is listed there once
  moved; one the mover acked out of order is past its due time too, so none is
  listed twice.

Each message is one ``STREAM.MSG.GET`` (next by subject) request; a listing reads at
most ``limit`` messages due now and :data:`DELAYED_READ_FACTOR` times ``limit`` of the
delayed subject.
"""

from __future__ import annotations

import time

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from framework_m_core.ports import Waiting

from .errors import server_errors
from .settings import NatsSettings
from .wire import due_ms

#: How many delayed subject messages a listing reads per job it may list (the others
#: are moved ones the mover acked after the ack floor).
DELAYED_READ_FACTOR = 4


async def read(js: JetStreamContext, s: NatsSettings, limit: int) -> list[Waiting]:
    """Up to ``limit`` held messages: due ones in line, then delayed ones by due time."""
    if limit < 1:
        return []
    with server_errors("reading waiting jobs"):
        try:
            jobs = await js.consumer_info(s.stream, s.consumer)
            later = await js.consumer_info(s.stream, s.delayed_consumer)
        except NotFoundError:
            return []  # nothing was ever consumed here: schema sync makes the consumers
        delivered = jobs.delivered.stream_seq or 0
        due = await _after(
            js, s.stream, s.jobs_subject, delivered, min(limit, jobs.num_pending or 0)
        )
        out = [Waiting(body, 1, None) for body, _ in due]
        if len(out) >= limit:
            return out
        floor = later.ack_floor.stream_seq or 0
        delayed = await _after(js, s.stream, s.delayed_subject, floor, DELAYED_READ_FACTOR * limit)
    now_ms = time.time() * 1000
    held = [
        Waiting(body, 1, due_at / 1000)
        for body, due_at in delayed
        if due_at is not None and due_at > now_ms
    ]
    held.sort(key=lambda w: w.due_at or 0.0)
    return out + held[: limit - len(out)]


async def _after(
    js: JetStreamContext, stream: str, subject: str, seq: int, most: int
) -> list[tuple[bytes, int | None]]:
    """Up to ``most`` messages of ``subject`` after stream sequence ``seq``, in order:
    each body with its due time (unix ms) when it has one."""
    out: list[tuple[bytes, int | None]] = []
    while len(out) < most:
        try:
            raw = await js.get_msg(stream, seq + 1, subject=subject, next=True)
        except NotFoundError:  # no message of the subject after seq
            break
        seq = raw.seq or seq + 1
        out.append((raw.data or b"", due_ms(raw.headers)))
    return out

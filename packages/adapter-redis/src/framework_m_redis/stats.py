"""``queue_stats()`` on Redis: one read-only script (``scripts.STATS``), one round trip.

What each count is read from, atomically (a script sees no settle half done):

* ``ready``: ``XLEN(stream) - XPENDING count``. Exact because every settle script
  (ack, retry, release, dead-letter) runs ``XACK`` and ``XDEL`` in one step, so the
  stream holds only entries waiting for a consumer and entries pending for one.
  (``XINFO GROUPS``' ``lag`` can be nil after deletions: not used.) Retries already
  due but not yet moved back by a ``receive`` count here too: they wait for a
  consumer, not for their delay (as memory:// counts them).
* ``reserved``: the group's pending entries (``XPENDING`` summary).
* ``scheduled``: the delayed set's retries and delayed jobs not yet due (``ZCARD -
  ZCOUNT`` due); ``delayed`` of them the jobs enqueued for later, whose due times the
  enqueue also keeps by job id in a sorted set of their own (``ZCOUNT`` ahead of now),
  and ``retries`` the rest.
* ``dead_letters``: ``XLEN`` of the dead-letter stream.
* ``consumers``: see :data:`SEEN_SINCE`.

Before schema sync (no consumer group) nothing can be reserved or consumed: the
stream's entries are ready, ``reserved`` and ``consumers`` are 0.

ACL: ``ZCARD`` and ``ZCOUNT`` are not among the commands ``connection.check_permissions``
demands at connect, on purpose: a worker whose user may not run them still works, and
only this call fails, with a :class:`~framework_m_core.BrokerError` carrying Redis's
refusal, which names the command (grant ``+@sortedset``, or ``+zcard +zcount``, on
``fm:{<queue>}:*``). The stream commands it runs (``XLEN``, ``XPENDING``, ``XINFO
CONSUMERS``) are checked there.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from framework_m_core.ports import QueueStats

from .settings import RedisSettings

# ``consumers`` counts the group's consumers seen within twice the visibility timeout.
# Redis keeps a consumer in the group until it is deleted (a crashed worker's stays for
# ever), so counting them all would count dead workers. From Redis 7.2 on, XINFO
# CONSUMERS' ``idle`` is the time since the consumer's last *attempt* (an XREADGROUP that
# found nothing, an XCLAIM): a live worker makes one at least every min(1 s, visibility
# timeout / 2) while it waits for jobs (``receive``'s scan) and every visibility timeout
# / 3 while it runs them (``extend``); one silent for longer than the visibility timeout
# is already treated as gone (its jobs are reclaimed), and twice that leaves a margin.
# Before 7.2 (7.0.15 checked) ``idle`` only restarts when entries are delivered or
# claimed, and an empty read neither restarts it nor creates the consumer, so a live
# worker waiting on an empty queue is invisible: there ``consumers`` is None (unknown)
# rather than a count that says no one is there. The window is this connection's
# visibility timeout: ``m status`` and the workers should share the broker URL.
SEEN_SINCE = 0x070200


async def read(
    run: Callable[[str, list[str], list[Any]], Awaitable[Any]],
    s: RedisSettings,
    *,
    seen_since: int = SEEN_SINCE,
) -> QueueStats:
    """The queue's counts; ``run`` is the broker's script runner (BrokerError on failure).

    ``seen_since``: the server version (as ``redis.REDIS_VERSION_NUM``) from which
    consumers are counted; a test passes 0 to check the window on any server.
    """
    window_ms = int(2 * s.visibility_timeout * 1000)
    now_ms = int(time.time() * 1000)  # the clock PROMOTE compares due times with
    ready, reserved, scheduled, dead, consumers, delayed = await run(
        "STATS", [s.stream, s.delayed, s.dead, s.later], [s.group, now_ms, window_ms, seen_since]
    )
    return QueueStats(
        ready=int(ready),
        reserved=int(reserved),
        scheduled=int(scheduled),
        dead_letters=int(dead),
        consumers=None if consumers is None else int(consumers),
        delayed=int(delayed),
        retries=int(scheduled) - int(delayed),
    )

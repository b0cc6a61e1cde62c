"""Starts under a rate limit, logged in the broker's store across every replica.

A job with ``rate_limit="10/s"`` has a log of its starts (``keys.rate``,
one per value of its ``rate_key``): a memo holding the time of each start of the last
period, written by compare-and-set. A run starts only when its time goes into the log
while the log holds fewer starts than the rate allows in the period before it (and
:data:`MARGIN` more), so no period holds more starts than the rate, whichever replica
made them. The margin covers the time from the write to the handler's call: a run
whose write was sent longer ago than that logs its start again, at the time it is
called (:meth:`Rates.renew`).

A worker keeps one queue per key of the runs asking for a start and one task per key
that logs starts for them, oldest first, as many as there is room for in one write
(the runs of one pass of the event loop share it):
while the log is full it waits until its first start leaves the period (not a poll
per waiting run). Keys never share a log or a queue, so no key's runs wait behind
another's. A worker remembers each log as it last read or wrote it (one it never saw
as none), and writes on that without reading first; a write that finds the log
changed reads it again.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from ..control.shared import StartLog, shared
from ..errors import BrokerError
from ..ports.protocols import BrokerProtocol
from ..rates import Rate

log = logging.getLogger("framework_m.worker")
T = TypeVar("T")

#: Seconds a logged start counts beyond its rate's period, and so the longest time from
#: sending its write to calling the handler without logging the start again.
MARGIN = 0.1
#: Seconds added at random to a wait for room, so that the replicas waiting on one
#: key do not all write at the same moment.
JITTER = 0.01
#: Logs a worker remembers at most (the least recently used are read again).
REMEMBERED = 10_000


@dataclass(frozen=True, slots=True)
class Start:
    """A start logged for one run: the time logged, and when (monotonic) its write
    was sent."""

    key: str
    rate: Rate
    at: float
    sent: float


@dataclass(slots=True)
class Asked:
    """A run's request for a start: ``done`` holds the start once logged; ``seen`` is
    set once a write was tried for it (logged, or the log found full: it waits)."""

    done: asyncio.Future[Start]
    seen: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(slots=True)
class _Queue:
    rate: Rate
    waiting: deque[Asked] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None
    full: bool = False  # its task waits for room: a run asking now waits too


class Rates:
    """The starts one worker logs under its jobs' rates, one queue per key."""

    def __init__(self, broker: BrokerProtocol) -> None:
        self.broker = broker
        self._queues: dict[str, _Queue] = {}
        self._logs: OrderedDict[str, StartLog] = OrderedDict()  # as last read or written

    def ask(self, key: str, rate: Rate) -> Asked:
        """A start under ``key``'s ``rate``, logged once there is room: the runs asking
        for one of ``key`` in this worker get theirs in the order they asked, those of
        one pass of the event loop in one write."""
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _Queue(rate)
        asked = Asked(asyncio.get_running_loop().create_future())
        if queue.full:
            asked.seen.set()
        queue.waiting.append(asked)
        if queue.task is None:
            queue.task = asyncio.get_running_loop().create_task(self._serve(key, queue))
        return asked

    async def start(self, key: str, rate: Rate) -> Start:
        """:meth:`ask`, waiting for the start."""
        return await self.ask(key, rate).done

    def renewing(self, start: Start) -> Asked:
        """:meth:`renew` of ``start`` under way, as a request already tried."""
        asked = Asked(asyncio.get_running_loop().create_task(self.renew(start)))
        asked.seen.set()
        return asked

    def in_time(self, start: Start) -> bool:
        """Whether the handler of ``start``'s run may be called now: its write was sent
        at most :data:`MARGIN` ago, so its start counts for the period from now."""
        return time.monotonic() - start.sent <= MARGIN

    async def renew(self, start: Start) -> Start:
        """``start`` logged again at the time now (its old time taken out), or a start
        logged anew (waiting its turn) when its old time left the log meanwhile."""
        for _ in range(5):
            found = self._logs.get(start.key) or await self._read(start.key)
            if start.at not in found.starts:
                break
            starts = list(found.starts)
            starts.remove(start.at)  # one of the starts logged then: this run's
            sent, at = time.monotonic(), _stamp()
            if await self._write(start.key, start.rate, found, [*starts, at]):
                return Start(start.key, start.rate, at, sent)
        return await self.start(start.key, start.rate)

    async def _serve(self, key: str, queue: _Queue) -> None:
        """Log starts for ``queue``'s runs, oldest first, until none waits; every run
        waiting gets the error once the broker stays out of reach."""
        try:
            while queue.waiting:
                while queue.waiting and queue.waiting[0].done.done():  # stopped waiting
                    queue.waiting.popleft()
                if not queue.waiting:
                    break
                asking = list(queue.waiting)
                try:
                    started, wait = await self._log(key, queue.rate, len(asking))
                except BrokerError as exc:
                    self._fail(queue, exc)
                    return
                for start in started:
                    asked = queue.waiting.popleft()
                    if not asked.done.done():
                        asked.done.set_result(start)
                for asked in asking:
                    asked.seen.set()
                if not started:
                    queue.full = True
                    try:
                        await asyncio.sleep(wait + random.uniform(0.001, JITTER))
                    finally:
                        queue.full = False
        finally:
            queue.task = None
            if not queue.waiting:
                self._queues.pop(key, None)

    async def _log(self, key: str, rate: Rate, most: int) -> tuple[list[Start], float]:
        """Up to ``most`` starts logged in one write, as many as there is room for; with
        none, the seconds until the first start in the log leaves the period."""
        ttl = _ttl(rate)
        # A log this worker never saw is first taken to be empty: a write that creates
        # it is refused where it exists, and then it is read.
        found: StartLog | None = self._logs.get(key, _NONE)
        while True:
            if found is None:
                found = await self._read(key)
            at = _stamp()
            live = [start for start in found.starts if start > at - ttl]
            room = min(most, rate.limit - len(live))
            if room <= 0:
                # Others only add starts: a log remembered full is full.
                return [], max(0.0, min(live) + ttl - at)
            sent = time.monotonic()
            if await self._write(key, rate, found, [*live, *[at] * room]):
                return [Start(key, rate, at, sent)] * room, 0.0
            found = None

    async def _read(self, key: str) -> StartLog:
        found = await self._retried(key, lambda: shared(self.broker).read_starts(key))
        self._remember(key, found)
        return found

    async def _write(self, key: str, rate: Rate, found: StartLog, starts: list[float]) -> bool:
        """Whether ``starts`` replaced the log ``found`` (False: it changed meanwhile)."""

        async def write() -> int | None:
            return await shared(self.broker).write_starts(
                key, starts, found.version, ttl=_ttl(rate)
            )

        version = await self._retried(key, write)
        if version is None:
            self._logs.pop(key, None)
            return False
        self._remember(key, StartLog(tuple(starts), version))
        return True

    def _remember(self, key: str, found: StartLog) -> None:
        self._logs[key] = found
        self._logs.move_to_end(key)
        if len(self._logs) > REMEMBERED:
            self._logs.popitem(last=False)

    async def _retried(self, key: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``, tried again while the broker is out of reach, as long as a
        delivery stays reserved; its error then."""
        deadline = time.monotonic() + max(5.0, self.broker.visibility_timeout)
        delay = 0.1
        while True:
            try:
                return await call()
            except BrokerError as exc:
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("rate %s: %s; trying again in %.1fs", key, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _fail(self, queue: _Queue, exc: BrokerError) -> None:
        while queue.waiting:
            asked = queue.waiting.popleft()
            if not asked.done.done():
                asked.done.set_exception(exc)
            asked.seen.set()


_NONE = StartLog((), None)


def _stamp() -> float:
    """The time now as a log keeps it (ms), so that a start read back is the same."""
    return round(time.time(), 3)


def _ttl(rate: Rate) -> float:
    return rate.period + MARGIN

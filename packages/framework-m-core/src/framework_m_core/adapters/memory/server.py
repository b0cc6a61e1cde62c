"""The in-process server behind ``memory://``: named queues shared by the brokers of one process."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from dataclasses import dataclass, field

from ...ports import DeadLetter
from ...ports.store import Record

_MAX_DEAD_LETTERS = 10_000


@dataclass(slots=True)
class Entry:
    """One message and how often it was delivered as an attempt."""

    body: bytes
    deliveries: int = 0
    stored_at: float = field(default_factory=time.time)


@dataclass
class Queue:
    """The state of one named queue."""

    dedup_window: float
    visibility_timeout: float
    ready: deque[Entry] = field(default_factory=deque)
    delayed: list[tuple[float, int, Entry]] = field(default_factory=list)
    # token -> (entry, reserved-until); expired reservations are delivered again
    reserved: dict[int, tuple[Entry, float]] = field(default_factory=dict)
    dedup: dict[str, tuple[str, float]] = field(default_factory=dict)
    dedup_expiry: list[tuple[float, str]] = field(default_factory=list)
    dead: deque[DeadLetter] = field(default_factory=lambda: deque(maxlen=_MAX_DEAD_LETTERS))
    waiters: set[asyncio.Future[None]] = field(default_factory=set)
    consumers: set[int] = field(default_factory=set)  # ids of brokers that received, open
    seq: itertools.count[int] = field(default_factory=itertools.count)
    # the store: key -> (record, expires at by the monotonic clock or None); versions
    # count up across every key
    records: dict[str, tuple[Record, float | None]] = field(default_factory=dict)
    record_expiry: list[tuple[float, str]] = field(default_factory=list)  # a heap
    record_waiters: dict[str, set[asyncio.Future[None]]] = field(default_factory=dict)
    versions: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def record(self, key: str, now: float) -> Record | None:
        """The unexpired record under ``key`` (an expired one is dropped)."""
        held = self.records.get(key)
        if held is None:
            return None
        if held[1] is not None and held[1] <= now:
            del self.records[key]
            return None
        return held[0]

    def keep_record(self, key: str, record: Record, until: float | None, now: float) -> None:
        """Store ``record`` under ``key`` until ``until`` (None: for good); records
        expired by ``now`` are dropped on the way, so none outstays its ttl in memory."""
        while self.record_expiry and self.record_expiry[0][0] <= now:
            _, gone = heapq.heappop(self.record_expiry)
            self.record(gone, now)
        self.records[key] = (record, until)
        if until is not None:
            heapq.heappush(self.record_expiry, (until, key))
        self.wrote_record(key)

    def wrote_record(self, key: str) -> None:
        for fut in self.record_waiters.pop(key, ()):
            if not fut.done():
                fut.set_result(None)

    def wake(self) -> None:
        for fut in self.waiters:
            if not fut.done():
                fut.set_result(None)

    def seen(self, dedup_id: str, now: float) -> str | None:
        """The job id stored under ``dedup_id`` inside the window, if any."""
        while self.dedup_expiry and self.dedup_expiry[0][0] <= now:
            _, key = heapq.heappop(self.dedup_expiry)
            held = self.dedup.get(key)
            if held is not None and held[1] <= now:
                del self.dedup[key]
        held = self.dedup.get(dedup_id)
        return held[0] if held is not None and held[1] > now else None

    def remember(self, dedup_id: str, job_id: str, now: float) -> None:
        expires = now + self.dedup_window
        self.dedup[dedup_id] = (job_id, expires)
        heapq.heappush(self.dedup_expiry, (expires, dedup_id))

    def put(self, entry: Entry, *, first: bool = False) -> None:
        if first:
            self.ready.appendleft(entry)
        else:
            self.ready.append(entry)
        self.wake()

    def put_later(self, entry: Entry, due: float) -> None:
        heapq.heappush(self.delayed, (due, next(self.seq), entry))
        self.wake()

    def promote(self, now: float) -> float | None:
        """Make due delayed and expired reservations ready; return when the next one is due."""
        while self.delayed and self.delayed[0][0] <= now:
            self.ready.append(heapq.heappop(self.delayed)[2])
        expired = [tok for tok, (_, until) in self.reserved.items() if until <= now]
        for tok in expired:
            self.ready.append(self.reserved.pop(tok)[0])
        upcoming = [until for _, until in self.reserved.values()]
        if self.delayed:
            upcoming.append(self.delayed[0][0])
        return min(upcoming) if upcoming else None


_queues: dict[str, Queue] = {}


def find(name: str) -> Queue | None:
    """The queue called ``name``, if schema sync created it."""
    return _queues.get(name)


def create(name: str, dedup_window: float, visibility_timeout: float) -> Queue:
    """The queue called ``name`` with these settings, created or updated in place."""
    queue = _queues.setdefault(name, Queue(dedup_window, visibility_timeout))
    queue.dedup_window, queue.visibility_timeout = dedup_window, visibility_timeout
    return queue


def reset(name: str | None = None) -> None:
    """Forget one in-process queue (or all of them). For tests and embedding."""
    if name is None:
        _queues.clear()
    else:
        _queues.pop(name, None)

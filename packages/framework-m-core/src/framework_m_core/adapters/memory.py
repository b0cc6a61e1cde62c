"""``memory://``: the embedded default broker and the reference implementation of every port.

Everything lives in this process: one ``m worker`` on ``memory://`` ticks and
works with nothing else running. Brokers with the same name in one process
share one queue, so several instances behave like several connections to one
server. Nothing survives the process.

URL: ``memory://[name][?dedup_window=120&visibility_timeout=30]``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Self
from urllib.parse import urlsplit

from ..broker import BaseBroker, Capability, DeadLetter, Delivery, PublishResult
from ..errors import BrokerError, ConfigurationError
from ..messages import JobMessage
from ..schema import SchemaChange, SchemaPlan
from ..urls import query_params

DEFAULT_DEDUP_WINDOW = 120.0
DEFAULT_VISIBILITY_TIMEOUT = 30.0
_MAX_DEAD_LETTERS = 10_000


@dataclass(slots=True)
class _Entry:
    body: bytes
    deliveries: int = 0  # deliveries that counted as attempts


@dataclass
class _Queue:
    """The state of one named in-process queue."""

    dedup_window: float
    visibility_timeout: float
    ready: deque[_Entry] = field(default_factory=deque)
    delayed: list[tuple[float, int, _Entry]] = field(default_factory=list)
    # token -> (entry, reserved-until); expired reservations are delivered again
    reserved: dict[int, tuple[_Entry, float]] = field(default_factory=dict)
    dedup: dict[str, tuple[str, float]] = field(default_factory=dict)
    dedup_expiry: list[tuple[float, str]] = field(default_factory=list)
    dead: deque[DeadLetter] = field(default_factory=lambda: deque(maxlen=_MAX_DEAD_LETTERS))
    waiters: set[asyncio.Future[None]] = field(default_factory=set)
    seq: itertools.count[int] = field(default_factory=itertools.count)

    def wake(self) -> None:
        for fut in self.waiters:
            if not fut.done():
                fut.set_result(None)

    def seen(self, dedup_id: str, now: float) -> str | None:
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


_queues: dict[str, _Queue] = {}


class MemoryBroker(BaseBroker):
    """In-process broker; see the module docstring."""

    capabilities = frozenset(
        {
            Capability.DEAD_LETTER_INSPECTION,
            Capability.RAW_PUBLISH,
            Capability.REDELIVER_ON_CLOSE,
            Capability.NEW_ID_AFTER_WINDOW,
        }
    )

    def __init__(
        self,
        name: str = "default",
        *,
        dedup_window: float = DEFAULT_DEDUP_WINDOW,
        visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT,
    ) -> None:
        super().__init__(f"memory://{name}")
        if dedup_window <= 0 or visibility_timeout <= 0:
            raise ConfigurationError("memory:// dedup_window and visibility_timeout must be > 0")
        self.name = name
        self._window = float(dedup_window)
        self._visibility = float(visibility_timeout)
        self._queue: _Queue | None = None
        self._connected = False
        self._mine: set[int] = set()  # tokens reserved through this instance

    @classmethod
    def from_url(cls, url: str) -> Self:
        parts = urlsplit(url)
        if parts.scheme != "memory":
            raise ConfigurationError(f"not a memory:// URL: {url!r}")
        name = (parts.netloc + parts.path).strip("/") or "default"
        opts = query_params(url, {"dedup_window": float, "visibility_timeout": float})
        return cls(name, **opts)  # type: ignore[arg-type]

    @property
    def dedup_window(self) -> float:
        q = _queues.get(self.name)
        return q.dedup_window if q is not None else self._window

    @property
    def visibility_timeout(self) -> float:
        q = _queues.get(self.name)
        return q.visibility_timeout if q is not None else self._visibility

    @property
    def _q(self) -> _Queue:
        if self._queue is None:
            if not self._connected:
                raise BrokerError(f"memory://{self.name} is not connected")
            self._queue = _queues.get(self.name)
            if self._queue is None:
                raise BrokerError(
                    f"queue memory://{self.name} does not exist: run schema sync first "
                    "(a worker does at start; or m migrate)"
                )
        return self._queue

    async def connect(self) -> None:
        self._connected = True

    async def close(self) -> None:
        self._connected = False
        if self._queue is None:
            return
        q = self._queue
        for tok in self._mine:
            held = q.reserved.pop(tok, None)
            if held is not None:
                held[0].deliveries -= 1  # not worked on: not an attempt
                q.ready.appendleft(held[0])
        self._mine.clear()
        q.wake()
        self._queue = None

    async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
        q = self._q
        if message.deduplication_id is not None:
            now = time.monotonic()
            original = q.seen(message.deduplication_id, now)
            if original is not None:
                return PublishResult(original, duplicate=True)
            q.remember(message.deduplication_id, message.id, now)
        q.ready.append(_Entry(body))
        q.wake()
        return PublishResult(message.id)

    async def publish_raw(self, body: bytes) -> None:
        q = self._q
        q.ready.append(_Entry(bytes(body)))
        q.wake()

    async def receive(self, max_messages: int, timeout: float) -> Sequence[Delivery]:
        q = self._q
        deadline = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            next_due = q.promote(now)
            if q.ready:
                out: list[Delivery] = []
                while q.ready and len(out) < max_messages:
                    entry = q.ready.popleft()
                    entry.deliveries += 1
                    tok = next(q.seq)
                    q.reserved[tok] = (entry, now + q.visibility_timeout)
                    self._mine.add(tok)
                    out.append(Delivery(entry.body, entry.deliveries, tok))
                return out
            wait_until = deadline if next_due is None else min(deadline, next_due)
            if now >= deadline:
                return []
            fut = asyncio.get_running_loop().create_future()
            q.waiters.add(fut)
            try:
                await asyncio.wait_for(fut, max(0.0, wait_until - now))
            except TimeoutError:
                pass
            finally:
                q.waiters.discard(fut)

    def _take(self, delivery: Delivery) -> _Entry | None:
        self._mine.discard(delivery.handle)
        held = self._q.reserved.pop(delivery.handle, None)
        return None if held is None else held[0]

    async def ack(self, delivery: Delivery) -> None:
        self._take(delivery)

    async def retry(self, delivery: Delivery, delay: float) -> None:
        entry = self._take(delivery)
        if entry is not None:
            q = self._q
            heapq.heappush(q.delayed, (time.monotonic() + max(0.0, delay), next(q.seq), entry))
            q.wake()

    async def release(self, delivery: Delivery) -> None:
        entry = self._take(delivery)
        if entry is not None:
            entry.deliveries -= 1
            self._q.ready.appendleft(entry)
            self._q.wake()

    async def extend(self, delivery: Delivery) -> None:
        q = self._q
        held = q.reserved.get(delivery.handle)
        if held is not None:
            q.reserved[delivery.handle] = (held[0], time.monotonic() + q.visibility_timeout)

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        entry = self._take(delivery)
        body = entry.body if entry is not None else delivery.body
        self._q.dead.append(DeadLetter(body, reason, delivery.attempt, time.time()))

    async def dead_letters(self, limit: int = 100) -> Sequence[DeadLetter]:
        dead = list(self._q.dead)
        return dead[-limit:] if limit > 0 else []

    def _desired(self) -> dict[str, float]:
        return {"dedup_window": self._window, "visibility_timeout": self._visibility}

    async def plan_schema(self) -> SchemaPlan:
        q = _queues.get(self.name)
        target = f"queue memory://{self.name}"
        if q is None:
            return SchemaPlan((SchemaChange("create", target, "in-process queue"),))
        current = {"dedup_window": q.dedup_window, "visibility_timeout": q.visibility_timeout}
        return SchemaPlan(
            tuple(
                SchemaChange("update", target, f"{key} {current[key]:g}s -> {want:g}s")
                for key, want in self._desired().items()
                if current[key] != want
            )
        )

    async def sync_schema(self, *, dry_run: bool = False) -> SchemaPlan:
        plan = await self.plan_schema()
        if dry_run or plan.in_sync:
            return plan
        q = _queues.setdefault(self.name, _Queue(self._window, self._visibility))
        q.dedup_window, q.visibility_timeout = self._window, self._visibility
        return plan


def reset(name: str | None = None) -> None:
    """Forget one in-process queue (or all of them). For tests and embedding."""
    if name is None:
        _queues.clear()
    else:
        _queues.pop(name, None)

"""``memory://``: the embedded default broker and the reference implementation of every port.

Everything lives in this process: one ``m worker`` on ``memory://`` ticks and
works with nothing else running. Brokers with the same name in one process
share one queue (:mod:`.server`), so several instances behave like several
connections to one server. Nothing survives the process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from ...control.shared import shared
from ...ports import (
    BaseBroker,
    BrokerError,
    DeadLetter,
    Delivery,
    DeliveryLostError,
    JobMessage,
    PublishResult,
    QueueStats,
    SchemaPlan,
    Waiting,
)
from ...ports import Capability as C
from ...ports.store import StoreProtocol
from . import schema, server
from .settings import MemorySettings, parse_url
from .store import MemoryStore

# Settled tokens remembered per broker, so that a repeated settle call is a no-op.
_SETTLED_MEMORY = 10_000


class MemoryBroker(BaseBroker[MemorySettings]):
    """In-process broker; see the module docstring."""

    capabilities = frozenset(
        {
            C.DEAD_LETTER_INSPECTION,
            C.DEAD_LETTER_REMOVAL,
            C.REDELIVER_ON_CLOSE,
            C.NEW_ID_AFTER_WINDOW,
            C.UNCOUNTED_RELEASE,
            C.STORE_DEADLINE,
            C.STORED_DEDUP_WINDOW,
            C.QUEUE_STATS,
            C.DELAYED_ENQUEUE,
            C.WAITING_INSPECTION,
            C.RETRY_INSPECTION,
            C.STORE,  # and so leases, state and memos, on it
        }
    )
    parse_url = staticmethod(parse_url)

    def __init__(self, settings: MemorySettings) -> None:
        super().__init__(settings)
        self._open = False
        self._mine: set[int] = set()  # tokens reserved through this instance
        self._settled: dict[int, None] = {}  # tokens this instance settled, oldest first
        #: The wall clock server_time() reads: the process's (a test shifting time shifts it).
        self.clock: Callable[[], float] = time.time
        self._store = MemoryStore(lambda: self._q)

    @property
    def store(self) -> StoreProtocol:
        return self._store

    @property
    def dedup_window(self) -> float:
        queue = server.find(self.settings.name)
        return queue.dedup_window if queue is not None else self.settings.dedup_window

    max_body_size_option = "max_job_size"

    @property
    def max_body_size(self) -> int:
        return self.settings.max_job_size

    @property
    def visibility_timeout(self) -> float:
        queue = server.find(self.settings.name)
        return queue.visibility_timeout if queue is not None else self.settings.visibility_timeout

    @property
    def _q(self) -> server.Queue:
        if not self._open:
            raise self._not_connected()
        queue = server.find(self.settings.name)
        if queue is None:
            raise BrokerError(
                f"queue {self.display_url} does not exist: run schema sync first "
                "(a worker does at start; or m sync-schema)"
            )
        return queue

    # -- lifecycle ---------------------------------------------------------------------

    async def connect(self) -> None:
        self._open = True

    async def close(self) -> None:
        if not self._open:
            return
        self._open = False
        queue = server.find(self.settings.name)
        for tok in self._mine:
            held = queue.reserved.pop(tok, None) if queue is not None else None
            if held is not None and queue is not None:
                held[0].deliveries -= 1  # not worked on: not an attempt
                queue.put(held[0], first=True)
        self._mine.clear()
        if queue is not None:
            queue.consumers.discard(id(self))

    async def server_time(self) -> float | None:
        """The clock of the process the queue lives in (:attr:`clock`)."""
        if not self._open:
            raise self._not_connected()
        return self.clock()

    # -- schema ------------------------------------------------------------------------

    async def plan_schema(self) -> SchemaPlan:
        if not self._open:
            raise self._not_connected()
        return schema.plan(self.settings)

    async def _apply_schema(self, plan: SchemaPlan) -> None:
        schema.apply(self.settings)

    # -- publishing --------------------------------------------------------------------

    memos_in_publish = True  # created in the same step as the job is stored

    async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
        q = self._q
        if message.deduplication_id is not None:
            now = time.monotonic()
            original = q.seen(message.deduplication_id, now)
            if original is not None:
                return PublishResult(original, duplicate=True)
            q.remember(message.deduplication_id, message.id, now)
        memos = self.enqueue_memos(message, message.id)
        if memos:  # the store's write awaits nothing: the job and its memos in one step
            await shared(self).put_memos([(m.key, m.value, m.ttl, True) for m in memos])
        now = self.clock()
        entry = server.Entry(body, stored_at=now)
        if message.not_before is not None and message.not_before > now:
            q.put_later(entry, time.monotonic() + message.not_before - now)
        else:
            q.put(entry)
        return PublishResult(message.id)

    async def requeue(self, body: bytes) -> None:
        self._q.put(server.Entry(bytes(body)))

    # -- consuming ---------------------------------------------------------------------

    async def receive(self, max_messages: int, timeout: float) -> Sequence[Delivery]:
        q = self._q
        q.consumers.add(id(self))
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
                    out.append(Delivery(entry.body, entry.deliveries, tok, entry.stored_at))
                return out
            if now >= deadline:
                return []
            wake_at = deadline if next_due is None else min(deadline, next_due)
            fut = asyncio.get_running_loop().create_future()
            q.waiters.add(fut)
            try:
                async with asyncio.timeout(max(0.0, wake_at - now)):
                    await fut
            except TimeoutError:
                pass
            finally:
                q.waiters.discard(fut)

    def _settle(self, delivery: Delivery) -> server.Entry | None:
        """Take the delivery's entry off its reservation; None when it was settled already."""
        q, tok = self._q, delivery.handle
        held = q.reserved.pop(tok, None)
        if held is None:
            if tok in self._settled:
                return None
            raise DeliveryLostError("its reservation expired and the message was delivered again")
        self._mine.discard(tok)
        self._settled[tok] = None
        if len(self._settled) > _SETTLED_MEMORY:
            del self._settled[next(iter(self._settled))]
        return held[0]

    async def ack(self, delivery: Delivery) -> None:
        self._settle(delivery)

    async def retry(self, delivery: Delivery, delay: float) -> None:
        entry = self._settle(delivery)
        if entry is not None:
            self._q.put_later(entry, time.monotonic() + max(0.0, delay))

    async def release(self, delivery: Delivery) -> None:
        entry = self._settle(delivery)
        if entry is not None:
            entry.deliveries -= 1
            self._q.put(entry, first=True)

    async def extend(self, delivery: Delivery) -> None:
        q = self._q
        held = q.reserved.get(delivery.handle)
        if held is None:
            raise DeliveryLostError("its reservation expired and the message was delivered again")
        q.reserved[delivery.handle] = (held[0], time.monotonic() + q.visibility_timeout)

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        entry = self._settle(delivery)
        if entry is not None:
            self._q.dead.append(
                DeadLetter(entry.body, reason, delivery.attempt, time.time(), ref=object())
            )

    async def dead_letters(self, limit: int = 100) -> Sequence[DeadLetter]:
        dead = list(self._q.dead)
        return dead[-limit:] if limit > 0 else []

    async def queue_stats(self) -> QueueStats:
        q = self._q
        q.promote(time.monotonic())
        delayed = sum(1 for _, _, entry in q.delayed if entry.deliveries == 0)  # no attempt yet
        return QueueStats(
            ready=len(q.ready),
            reserved=len(q.reserved),
            scheduled=len(q.delayed),
            dead_letters=len(q.dead),
            consumers=len(q.consumers),
            delayed=delayed,
            retries=len(q.delayed) - delayed,
        )

    async def waiting(self, limit: int = 100) -> Sequence[Waiting]:
        if limit < 1:
            return []
        q = self._q
        now, wall = time.monotonic(), time.time()
        q.promote(now)
        ready = [Waiting(e.body, e.deliveries + 1, None) for e in list(q.ready)[:limit]]
        later = [
            Waiting(e.body, e.deliveries + 1, wall + (due - now))
            for due, _, e in sorted(q.delayed)[: limit - len(ready)]
        ]
        return ready + later

    async def remove_dead_letters(self, letters: Sequence[DeadLetter]) -> int:
        refs = {id(letter.ref) for letter in letters if letter.ref is not None}
        dead = self._q.dead
        kept = [d for d in dead if id(d.ref) not in refs]
        removed = len(dead) - len(kept)
        dead.clear()
        dead.extend(kept)
        return removed

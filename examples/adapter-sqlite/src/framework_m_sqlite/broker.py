"""``sqlite://``: framework-m on one SQLite file shared by the processes of a host.

A job is a row of ``fm_jobs``; receiving reserves rows by writing a random
token and an expiry into them, so that every settle call names its
reservation (``WHERE id = ? AND token = ?``) and a late one finds nothing.
Deduplication is the ``UNIQUE (queue, dedup_id)`` constraint of ``fm_dedup``,
checked and written with the job in one ``BEGIN IMMEDIATE`` transaction, which
SQLite serializes between processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from framework_m_core.ports import (
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
from framework_m_core.ports import Capability as C
from framework_m_core.ports.store import StoreProtocol

from . import schema
from .settings import SqliteSettings, parse_url
from .store import SqliteStore, transaction

T = TypeVar("T")
_POLL = (0.005, 0.05)  # receive polls the table, backing off from the first to the second


class SqliteBroker(BaseBroker[SqliteSettings]):
    """SQLite adapter; see the module docstring."""

    # Every optional promise but REDELIVER_ON_DISCONNECT: a killed process's rows
    # stay reserved until their visibility timeout. STORE_DEADLINE: _store checks it.
    # Leases, state and memos are core's, on the store (store.py).
    capabilities = frozenset(C) - {C.REDELIVER_ON_DISCONNECT}
    parse_url = staticmethod(parse_url)

    def __init__(self, settings: SqliteSettings) -> None:
        super().__init__(settings)
        self._db: sqlite3.Connection | None = None
        self._lock = asyncio.Lock()  # one statement at a time on the one connection
        self._stored: dict[str, float] = {}
        self._held: dict[tuple[int, str], Delivery] = {}
        self._settled: set[tuple[int, str]] = set()
        self._records = SqliteStore(settings.queue, self._run)

    @property
    def store(self) -> StoreProtocol:
        return self._records

    @property
    def dedup_window(self) -> float:
        return self._stored.get("dedup_window", self.settings.dedup_window)

    @property
    def visibility_timeout(self) -> float:
        return self._stored.get("visibility_timeout", self.settings.visibility_timeout)

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        db = self._connected(self._db)
        async with self._lock:
            try:
                return await asyncio.to_thread(work, db)
            except sqlite3.Error as exc:
                raise BrokerError(f"{self.display_url}: {exc}") from None

    # -- lifecycle ---------------------------------------------------------------------

    async def connect(self) -> None:
        if self._db is not None:
            return
        try:
            db = sqlite3.connect(
                self.settings.path, timeout=30, isolation_level=None, check_same_thread=False
            )
            db.execute("PRAGMA journal_mode = WAL")
        except sqlite3.Error as exc:
            raise BrokerError(f"cannot open {self.display_url}: {exc}") from None
        self._db = db
        self._stored = await self._run(lambda db: schema.stored(db, self.settings.queue))

    async def close(self) -> None:
        if self._db is None:
            return
        for delivery in list(self._held.values()):  # release what this consumer holds
            with contextlib.suppress(BrokerError):
                await self.release(delivery)
        db, self._db = self._db, None
        db.close()

    # -- schema ------------------------------------------------------------------------

    async def plan_schema(self) -> SchemaPlan:
        return await self._run(lambda db: schema.plan(db, self.settings))

    async def _apply_schema(self, plan: SchemaPlan) -> None:
        await self._run(lambda db: schema.apply(db, self.settings))
        self._stored = await self._run(lambda db: schema.stored(db, self.settings.queue))

    # -- publishing --------------------------------------------------------------------

    async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
        return await self._run(lambda db: self._store(db, message, body))

    def _store(self, db: sqlite3.Connection, message: JobMessage, body: bytes) -> PublishResult:
        q, dedup = self.settings.queue, message.deduplication_id
        with transaction(db):
            now = time.time()  # once the write lock is ours
            if message.not_after is not None and now > message.not_after:
                raise BrokerError(f"{message.job_name}: past its not_after deadline, not stored")
            if dedup is not None:
                db.execute(
                    "DELETE FROM fm_dedup WHERE queue = ? AND dedup_id = ? AND expires <= ?",
                    (q, dedup, now),
                )
                added = db.execute(
                    "INSERT OR IGNORE INTO fm_dedup VALUES (?, ?, ?, ?)",
                    (q, dedup, message.id, now + self.dedup_window),
                ).rowcount
                if not added:
                    (original,) = db.execute(
                        "SELECT job_id FROM fm_dedup WHERE queue = ? AND dedup_id = ?", (q, dedup)
                    ).fetchone()
                    return PublishResult(original, duplicate=True)
            due = max(now, message.not_before or now)  # a delayed job waits until due
            db.execute("INSERT INTO fm_jobs (queue, body, due) VALUES (?, ?, ?)", (q, body, due))
        return PublishResult(message.id)

    async def requeue(self, body: bytes) -> None:
        q = self.settings.queue
        await self._run(
            lambda db: db.execute(
                "INSERT INTO fm_jobs (queue, body, due) VALUES (?, ?, ?)", (q, body, time.time())
            )
        )

    # -- consuming ---------------------------------------------------------------------

    async def receive(self, max_messages: int, timeout: float) -> Sequence[Delivery]:
        deadline, pause = time.monotonic() + timeout, _POLL[0]
        while True:
            taken = await self._run(lambda db: self._reserve(db, max_messages))
            if taken or time.monotonic() >= deadline:
                return taken
            await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, _POLL[1])

    def _reserve(self, db: sqlite3.Connection, limit: int) -> list[Delivery]:
        token, now = os.urandom(8).hex(), time.time()
        with transaction(db):
            rows = db.execute(
                "UPDATE fm_jobs SET token = ?, until = ?, deliveries = deliveries + 1 "
                "WHERE id IN (SELECT id FROM fm_jobs WHERE queue = ? AND due <= ? "
                "AND (until IS NULL OR until <= ?) ORDER BY due, id LIMIT ?) "
                "RETURNING id, body, deliveries",
                (token, now + self.visibility_timeout, self.settings.queue, now, now, limit),
            ).fetchall()
        out = []
        for row_id, body, deliveries in sorted(rows):
            delivery = Delivery(bytes(body), deliveries, (row_id, token))
            self._held[(row_id, token)] = delivery
            out.append(delivery)
        return out

    async def _settle(
        self, delivery: Delivery, sql: str, *args: object, extend: bool = False
    ) -> None:
        """Run ``sql`` (ending ``WHERE id = ? AND token = ?``) on the delivery's row while its
        reservation holds. A delivery settled already is left alone; one that another
        consumer holds now raises DeliveryLostError."""
        handle = delivery.handle
        if handle in self._settled:
            return
        changed = await self._run(lambda db: db.execute(sql, (*args, *handle)).rowcount)
        self._done(handle, changed, extend)

    def _done(self, handle: tuple[int, str], changed: int, extend: bool) -> None:
        if not changed:
            self._held.pop(handle, None)
            raise DeliveryLostError("its reservation expired and the job was taken again")
        if not extend:
            self._held.pop(handle, None)
            self._settled.add(handle)

    async def ack(self, delivery: Delivery) -> None:
        await self._settle(delivery, "DELETE FROM fm_jobs WHERE id = ? AND token = ?")

    async def retry(self, delivery: Delivery, delay: float) -> None:
        await self._settle(
            delivery,
            "UPDATE fm_jobs SET token = NULL, until = NULL, due = ? WHERE id = ? AND token = ?",
            time.time() + max(0.0, delay),
        )

    async def release(self, delivery: Delivery) -> None:
        await self._settle(
            delivery,
            "UPDATE fm_jobs SET token = NULL, until = NULL, deliveries = deliveries - 1 "
            "WHERE id = ? AND token = ?",
        )

    async def extend(self, delivery: Delivery) -> None:
        await self._settle(
            delivery,
            "UPDATE fm_jobs SET until = ? WHERE id = ? AND token = ?",
            time.time() + self.visibility_timeout,
            extend=True,
        )

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        handle, q = delivery.handle, self.settings.queue
        if handle in self._settled:
            return

        def move(db: sqlite3.Connection) -> int:
            with transaction(db):
                gone = db.execute("DELETE FROM fm_jobs WHERE id = ? AND token = ?", handle)
                if gone.rowcount:
                    db.execute(
                        "INSERT INTO fm_dead (queue, body, reason, attempts, dead_at) "
                        "VALUES (?, ?, ?, ?, ?)",
                        (q, delivery.body, reason, delivery.attempt, time.time()),
                    )
            return int(gone.rowcount)

        self._done(handle, await self._run(move), extend=False)

    async def dead_letters(self, limit: int = 100) -> Sequence[DeadLetter]:
        rows = await self._run(
            lambda db: db.execute(
                "SELECT body, reason, attempts, dead_at, id FROM fm_dead WHERE queue = ? "
                "ORDER BY id DESC LIMIT ?",
                (self.settings.queue, max(0, limit)),
            ).fetchall()
        )
        return [DeadLetter(bytes(b), r, n, t, ref=i) for b, r, n, t, i in reversed(rows)]

    async def queue_stats(self) -> QueueStats:
        """Counts of the queue's rows: reserved while a reservation runs, scheduled while a
        retry's due time is ahead, ready otherwise; ``consumers`` None (nobody registers)."""
        q, now = self.settings.queue, time.time()

        def count(db: sqlite3.Connection) -> tuple[int, int, int, int]:
            ready, reserved, scheduled = db.execute(
                "SELECT COUNT(*) FILTER (WHERE (until IS NULL OR until <= ?) AND due <= ?), "
                "COUNT(*) FILTER (WHERE until > ?), "
                "COUNT(*) FILTER (WHERE (until IS NULL OR until <= ?) AND due > ?) "
                "FROM fm_jobs WHERE queue = ?",
                (now, now, now, now, now, q),
            ).fetchone()
            [dead] = db.execute("SELECT COUNT(*) FROM fm_dead WHERE queue = ?", (q,)).fetchone()
            return ready, reserved, scheduled, dead

        ready, reserved, scheduled, dead = await self._run(count)
        return QueueStats(ready, reserved, scheduled, dead)

    async def waiting(self, limit: int = 100) -> Sequence[Waiting]:
        """The rows no reservation holds: those due first, by due time and id (the order
        ``receive`` takes them in), then those due later by due time."""
        if limit < 1:
            return []
        q, now = self.settings.queue, time.time()

        def read(db: sqlite3.Connection) -> list[tuple[bytes, int, float]]:
            return db.execute(
                "SELECT body, deliveries, due FROM fm_jobs WHERE queue = ? "
                "AND (until IS NULL OR until <= ?) ORDER BY due > ?, due, id LIMIT ?",
                (q, now, now, limit),
            ).fetchall()

        rows = await self._run(read)
        return [
            Waiting(bytes(body), deliveries + 1, None if due <= now else due)
            for body, deliveries, due in rows
        ]

    async def remove_dead_letters(self, letters: Sequence[DeadLetter]) -> int:
        ids = [(letter.ref, self.settings.queue) for letter in letters]

        def remove(db: sqlite3.Connection) -> int:
            with transaction(db):
                return sum(
                    db.execute("DELETE FROM fm_dead WHERE id = ? AND queue = ?", row).rowcount
                    for row in ids
                )

        return int(await self._run(remove))

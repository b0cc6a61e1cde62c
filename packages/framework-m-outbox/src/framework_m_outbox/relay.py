"""The relay in every ``m worker --outbox-url`` replica: committed outbox rows to the broker.

Each pass claims up to :data:`BATCH` due rows for :data:`LEASE` seconds (``FOR UPDATE
SKIP LOCKED`` on PostgreSQL and MariaDB/MySQL: replicas never wait on each other's
rows; one ``UPDATE ... RETURNING`` on SQLite), publishes each with its deduplication
id, and deletes the rows the broker answered for. A row whose publish failed stays,
tried again after a backoff. A relay killed after publishing leaves its rows claimed:
another relay publishes them again once the claim lapsed, inside the broker's dedup
window (:meth:`OutboxRelay.check` refuses a claim too long for it), and the broker
drops the copy. No relay leads: all of them relay, and the broker's deduplication makes
it once.

A row published again after the window (every relay was away that long) is looked up
first: when the broker keeps the job's status, a job it already has is not sent again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from framework_m_core.control import jobs
from framework_m_core.errors import ConfigurationError, FrameworkMError, SchemaMissingError
from framework_m_core.observability.observer import Observer
from framework_m_core.ports import BrokerProtocol, Capability, RelayProtocol, decode_message
from framework_m_core.ports.statuses import JobState

from . import database, table
from .listening import Listener
from .table import outbox

log = logging.getLogger("framework_m.outbox")

#: Seconds a pass's claim holds its rows at most: another relay takes them after that.
#: Below it, half of what the dedup window leaves after the clock skew.
LEASE = 30.0
#: The shortest claim a relay runs with: a dedup window leaving less is refused.
MIN_LEASE = 2.0
#: Rows claimed at most per pass.
BATCH = 200
#: Seconds between looks at the table when no notification wakes the relay.
POLL = 1.0
#: While PostgreSQL notifies each commit, looks are this many times rarer (they find
#: only rows due again after a failure, or claims of a relay that died).
LISTENING_SLOWER = 5
#: Seconds between counts of the rows waiting (metrics, the replica roll).
COUNT_EVERY = 5.0
#: A failed publish is tried again after this, doubling per failure up to BACKOFF_MAX.
BACKOFF_MIN = 0.5
BACKOFF_MAX = 30.0
#: Seconds between attempts while the database is out of reach, at most.
DATABASE_BACKOFF_MAX = 10.0


class _Deferred(Exception):
    """A delayed job for a broker that cannot hold one: its row waits until ``until``."""

    def __init__(self, until: float) -> None:
        super().__init__(until)
        self.until = until


@dataclasses.dataclass(frozen=True, slots=True)
class _Claimed:
    id: str
    job_id: str
    body: str
    attempts: int
    first_tried_at: float


class OutboxRelay(RelayProtocol):
    """Publishes the committed rows of the outbox table at ``url`` to ``broker``.

    :param url: a SQLAlchemy database URL (PostgreSQL, MariaDB/MySQL, SQLite); its
        async driver is chosen by :func:`~.database.parse`.
    :param sync_schema: create the table at start when missing; False only checks it.
    :param clock_skew: clock difference tolerated between replicas, seconds (claims are
        judged by each relay's clock).
    :param lease: seconds a claim holds its rows (default: :data:`LEASE`, or half of what
        the broker's dedup window leaves after ``clock_skew`` when that is less).
    """

    name = "outbox relay"

    def __init__(
        self,
        url: str,
        broker: BrokerProtocol,
        *,
        sync_schema: bool = True,
        clock_skew: float = 0.0,
        observer: Observer | None = None,
        lease: float | None = None,
        batch: int = BATCH,
        poll: float = POLL,
    ) -> None:
        if (lease is not None and lease <= 0) or batch < 1 or poll <= 0:
            raise ValueError("lease and poll must be > 0, batch >= 1")
        self.url = database.parse(url)
        self.display_url = database.display(self.url)
        self.broker = broker
        self.sync_schema = sync_schema
        self.clock_skew = clock_skew
        self.observer = observer or Observer()
        self._lease = lease  # None: from the dedup window, at check()
        self.lease = LEASE if lease is None else lease
        self.batch = batch
        self.poll = poll
        self.relayed = 0
        self._window: float | None = None
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()
        self._seen: dict[str, float] = {}
        self._retry_at: float | None = None  # the earliest retry of a row failed here
        self._counted_at = -COUNT_EVERY
        self._engine: AsyncEngine | None = None
        self._listener: Listener | None = None

    def __repr__(self) -> str:
        return f"<OutboxRelay {self.display_url}>"

    def check(self, dedup_window: float) -> None:
        if self._lease is None:
            self.lease = min(LEASE, (dedup_window - self.clock_skew) / 2)
        if self.lease + self.clock_skew >= dedup_window or self.lease < MIN_LEASE:
            raise ConfigurationError(
                f"the outbox relay's claim of {self.lease:g}s plus the tolerated clock skew "
                f"of {self.clock_skew:g}s must stay below the broker's dedup window of "
                f"{dedup_window:g}s, and a claim lasts {MIN_LEASE:g}s at least: a row "
                "published again after a relay died could run twice; widen the broker's "
                "dedup window"
            )
        self._window = dedup_window

    @property
    def _holds_jobs(self) -> bool:
        return Capability.DELAYED_ENQUEUE in self.broker.capabilities

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def described(self) -> dict[str, float]:
        return dict(self._seen)

    @property
    def _due_poll(self) -> float:
        listening = self._listener is not None and self._listener.listening
        wait = self.poll * LISTENING_SLOWER if listening else self.poll
        if self._retry_at is not None:  # a row that failed here is due again then
            wait = min(wait, max(0.0, self._retry_at - time.time()))
        return wait

    async def run(self) -> None:
        if self._window is None:
            self.check(self.broker.dedup_window)
        self._engine = engine = database.engine(self.url)
        try:
            if not await self._prepare(engine):
                return
            if engine.dialect.name == "postgresql":
                self._listener = Listener(self.url, self._wake)
                self._listener.start()
            log.info(
                "outbox relay on %s: %s",
                self.display_url,
                "woken by each commit (LISTEN)"
                if self._listener is not None
                else f"looking every {self.poll:g}s",
            )
            await self._relay(engine)
        finally:
            if self._listener is not None:
                await self._listener.close()
            await engine.dispose()

    async def _prepare(self, engine: AsyncEngine) -> bool:
        """Create or check the table, trying again while the database is out of reach;
        False when stopped meanwhile."""
        failures = 0
        while not self._stopping.is_set():
            try:
                async with engine.connect() as conn:
                    if self.sync_schema:
                        for change in await table.sync(conn):
                            log.info("outbox schema: %s in %s", change, self.display_url)
                    else:
                        await table.check(conn)
                return True
            except SchemaMissingError:
                raise
            except (sa.exc.SQLAlchemyError, OSError) as exc:
                failures += 1
                wait = min(DATABASE_BACKOFF_MAX, 0.5 * 2**failures)
                log.warning(
                    "outbox relay: %s out of reach at start (%s); trying again in %.1fs",
                    self.display_url,
                    _short(exc),
                    wait,
                )
                await self._sleep(wait)
        return False

    async def _relay(self, engine: AsyncEngine) -> None:
        failing = False
        failures = 0
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                claimed = await self._pass(engine)
                await self._count(engine)
                if failing:
                    log.info("outbox relay: %s answers again", self.display_url)
                failing, failures = False, 0
            except (sa.exc.SQLAlchemyError, OSError) as exc:
                failures += 1
                wait = min(DATABASE_BACKOFF_MAX, 0.25 * 2**failures)
                if not failing:
                    log.warning(
                        "outbox relay: %s out of reach (%s); trying again every %.0fs at most",
                        self.display_url,
                        _short(exc),
                        DATABASE_BACKOFF_MAX,
                    )
                failing = True
                await self._sleep(wait)
                continue
            if claimed < self.batch:  # a full batch: more may wait
                await self._sleep(self._due_poll, wake=True)

    async def _sleep(self, seconds: float, *, wake: bool = False) -> None:
        """Wait ``seconds``, or less when stopped (or, with ``wake``, notified)."""
        event = self._wake if wake else self._stopping
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), seconds)

    async def _pass(self, engine: AsyncEngine) -> int:
        """Claim, publish, delete; the number of rows claimed."""
        now = time.time()
        if self._retry_at is not None and self._retry_at <= now:
            self._retry_at = None  # this pass claims it
        async with engine.begin() as conn:
            claimed = await self._claim(conn, now)
        if not claimed:
            return 0
        published, failed, deferred = await self._publish(claimed, now)
        async with engine.begin() as conn:
            if published:
                await conn.execute(sa.delete(outbox).where(outbox.c.id.in_(published)))
            for row_id, until in deferred.items():
                await conn.execute(
                    sa.update(outbox)
                    .where(outbox.c.id == row_id)
                    .values(next_try_at=until, claimed_until=0.0, first_tried_at=None)
                )
            for row_id, (attempts, error) in failed.items():
                retry_at = time.time() + _backoff(attempts)
                self._retry_at = min(self._retry_at or retry_at, retry_at)
                await conn.execute(
                    sa.update(outbox)
                    .where(outbox.c.id == row_id)
                    .values(
                        attempts=attempts,
                        next_try_at=retry_at,
                        claimed_until=0.0,
                        last_error=error[: table.ERROR_LENGTH],
                    )
                )
        self.relayed += len(published)
        if published:
            self.observer.outbox_relayed(len(published))
        if failed:
            self.observer.outbox_failed(len(failed))
        return len(claimed)

    async def _claim(self, conn: AsyncConnection, now: float) -> list[_Claimed]:
        c = outbox.c
        due = sa.and_(c.next_try_at <= now, c.claimed_until <= now)
        first = sa.func.coalesce(c.first_tried_at, now)
        values = {"claimed_until": now + self.lease, "first_tried_at": first}
        columns = (c.id, c.job_id, c.body, c.attempts, c.first_tried_at)
        if conn.dialect.name == "sqlite":  # one writer at a time: no row locks to skip
            first_due = (
                sa.select(c.id).where(due).order_by(c.next_try_at, c.created_at).limit(self.batch)
            )
            statement = (
                sa.update(outbox).where(c.id.in_(first_due)).values(values).returning(*columns)
            )
            rows = (await conn.execute(statement)).all()
        else:
            query = (
                sa.select(*columns)
                .where(due)
                .order_by(c.next_try_at, c.created_at)
                .limit(self.batch)
                .with_for_update(skip_locked=True)
            )
            rows = (await conn.execute(query)).all()
            if rows:
                mine = [r.id for r in rows]
                await conn.execute(sa.update(outbox).where(c.id.in_(mine)).values(values))
        return [_Claimed(r.id, r.job_id, r.body, r.attempts, r.first_tried_at or now) for r in rows]

    async def _publish(
        self, claimed: Sequence[_Claimed], now: float
    ) -> tuple[list[str], dict[str, tuple[int, str]], dict[str, float]]:
        """Publish each claimed row; the ids the broker answered for, the failed ones
        with their attempt count and error, and the delayed ones a broker that cannot
        hold them leaves to wait in the table, with their due time."""
        stale = await self._already_stored(claimed, now)
        tasks = {
            row.id: asyncio.create_task(self._publish_one(row))
            for row in claimed
            if row.id not in stale
        }
        if tasks:  # answers are awaited at most half the claim: the rest is tried again
            await asyncio.wait(tasks.values(), timeout=self.lease / 2)
        published, failed, deferred = list(stale), {}, {}
        for row in claimed:
            task = tasks.get(row.id)
            if task is None:
                continue
            error: str | None = None
            if not task.done():
                task.cancel()
                error = f"no answer from the broker within {self.lease / 2:g}s"
            elif isinstance(task.exception(), _Deferred):
                deferred[row.id] = cast(_Deferred, task.exception()).until
                continue
            elif task.exception() is not None:
                exc = task.exception()
                error = f"{type(exc).__name__}: {exc}"
            if error is None:
                published.append(row.id)
                continue
            failed[row.id] = (row.attempts + 1, error)
            log.warning(
                "outbox relay: publish of job %s (row %s) failed, attempt %d; trying again "
                "in %.1fs: %s",
                row.job_id,
                row.id,
                row.attempts + 1,
                _backoff(row.attempts + 1),
                error,
            )
        return published, failed, deferred

    async def _publish_one(self, row: _Claimed) -> None:
        message = decode_message(row.body.encode())
        if message.id != row.job_id:
            raise FrameworkMError(f"the row's body names job {message.id}, not {row.job_id}")
        if message.not_before is not None and message.not_before <= time.time():
            message = dataclasses.replace(message, not_before=None)
        if message.not_before is not None and not self._holds_jobs:
            raise _Deferred(message.not_before)  # the broker cannot hold it: the row does
        await self.broker.publish(message)

    async def _already_stored(self, claimed: Sequence[_Claimed], now: float) -> set[str]:
        """Rows first published longer ago than the dedup window allows a copy to be
        dropped: those whose job the broker already has (by its status) are not sent
        again."""
        assert self._window is not None
        margin = self._window - self.clock_skew - self.lease / 2
        late = [row for row in claimed if now - row.first_tried_at > margin]
        if not late:
            return set()
        try:
            statuses = await jobs.job_statuses(self.broker, [row.job_id for row in late])
        except FrameworkMError as exc:
            log.warning(
                "outbox relay: %d row(s) first published over %.0fs ago, publishing them "
                "again unchecked (the broker's copy, if any, may run too): %s",
                len(late),
                margin,
                exc,
            )
            return set()
        stored = set()
        for row, status in zip(late, statuses, strict=True):
            if status.state is JobState.UNKNOWN:
                log.warning(
                    "outbox relay: job %s (row %s) first published %.0fs ago, past the "
                    "dedup window; the broker keeps no status of it: publishing it again",
                    row.job_id,
                    row.id,
                    now - row.first_tried_at,
                )
            else:
                log.info(
                    "outbox relay: job %s (row %s) is on the broker already (%s): not sent again",
                    row.job_id,
                    row.id,
                    status.state,
                )
                stored.add(row.id)
        return stored

    async def _count(self, engine: AsyncEngine) -> None:
        """Count the rows waiting, now and then, for the metrics and the replica roll."""
        now = time.time()
        if time.monotonic() - self._counted_at < COUNT_EVERY:
            return
        self._counted_at = time.monotonic()
        c = outbox.c
        failing = sa.func.sum(sa.case((c.attempts > 0, 1), else_=0))
        async with engine.connect() as conn:
            found = (
                await conn.execute(sa.select(sa.func.count(), sa.func.min(c.created_at), failing))
            ).one()
        rows, oldest_at, failing_rows = int(found[0]), found[1], int(found[2] or 0)
        oldest = None if oldest_at is None else max(0.0, now - float(oldest_at))
        self.observer.outbox_seen(rows, oldest, failing_rows)
        self._seen = {
            "rows": float(rows),
            "oldest": oldest or 0.0,
            "failing": float(failing_rows),
            "seen_at": now,
        }


def _backoff(attempts: int) -> float:
    """Seconds before a row whose publish failed ``attempts`` times is tried again."""
    return float(min(BACKOFF_MAX, BACKOFF_MIN * 2 ** (attempts - 1)))


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:300]

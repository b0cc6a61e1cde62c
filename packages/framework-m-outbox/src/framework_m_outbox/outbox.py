"""``Outbox(session)``: a job queue that writes each job as a row in the caller's
transaction, for the relays of ``m worker --outbox-url`` to publish once committed."""

from __future__ import annotations

import dataclasses
import importlib
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from framework_m_core.errors import ConfigurationError, InvalidJobError
from framework_m_core.ports import (
    DEFAULT_MAX_JOB_SIZE,
    BatchJob,
    JobMessage,
    JobQueueProtocol,
    derived_job_id,
    new_message,
)
from framework_m_core.ports.messages import delay_seconds, due_time, new_job_id

from .table import TABLE_NAME, outbox

Target = Session | sa.Connection | AsyncSession | AsyncConnection
#: The databases a Django connection may be on (its ``vendor``).
DJANGO_VENDORS = ("postgresql", "mysql", "sqlite")


def outbox_deduplication_id(row_id: str) -> str:
    """The deduplication id a row is published with when its job has none of its own."""
    return f"outbox:{row_id}"


def row(message: JobMessage, now: float | None = None) -> dict[str, Any]:
    """``message`` as an outbox row: its job id fixed by its deduplication id (the
    caller's, else ``outbox:{row id}``), encoded and checked as a broker would."""
    row_id = new_job_id()
    dedup = message.deduplication_id or outbox_deduplication_id(row_id)
    message = dataclasses.replace(message, id=derived_job_id(dedup), deduplication_id=dedup)
    body = message.encode()
    if len(body) > DEFAULT_MAX_JOB_SIZE:
        raise InvalidJobError(
            f"job {message.job_name!r} is {len(body):,} bytes encoded; the outbox stores at "
            f"most {DEFAULT_MAX_JOB_SIZE:,} bytes: pass large data by reference (a key, a "
            "URL), not in kwargs"
        )
    now = time.time() if now is None else now
    return {
        "id": row_id,
        "job_id": message.id,
        "job_name": message.job_name,
        "body": body.decode(),
        "created_at": now,
        "next_try_at": 0.0,  # due at once: relays compare it with their own clocks
        "claimed_until": 0.0,
        "attempts": 0,
    }


class Outbox(JobQueueProtocol):
    """A job queue in the caller's database transaction: each enqueue inserts a row
    through ``session_or_connection`` (a SQLAlchemy ``Session`` or ``Connection``, their
    async kinds, or a Django connection such as ``django.db.connection``) and commits
    nothing. Rolled back, the job never runs; committed,
    a relay publishes it once.

    ``await job.enqueue(Outbox(async_session), ...)`` and
    ``job.enqueue_sync(Outbox(session), ...)`` write through a handle; ``enqueue`` (by
    name) and its ``_sync`` kinds too. The id returned is the job's id on the broker it
    is relayed to; the job has a status there once relayed.
    """

    def __init__(self, session_or_connection: Target | Any) -> None:
        target: Any = session_or_connection
        if not isinstance(target, Target) and not _is_django(target):
            raise ConfigurationError(
                "Outbox takes a SQLAlchemy Session or Connection, an AsyncSession or "
                "AsyncConnection, or a Django connection (django.db.connection), got "
                f"{type(target).__name__}"
            )
        if _is_django(target) and target.vendor not in DJANGO_VENDORS:
            raise ConfigurationError(
                "the outbox keeps its table in PostgreSQL, MariaDB/MySQL or SQLite, not "
                f"{target.vendor!r}"
            )
        self.target = target

    def __repr__(self) -> str:
        return f"Outbox({type(self.target).__name__})"

    # -- the writer ports (what handles call) ----------------------------------------------

    async def write_job(self, message: JobMessage) -> str:
        """Insert ``message`` as a row in the target's transaction; return its job id."""
        return (await self._insert_async([row(message)]))[0]

    def write_job_sync(self, message: JobMessage) -> str:
        """:meth:`write_job`, blocking: for a sync ``Session`` or ``Connection``."""
        return self._insert_sync([row(message)])[0]

    # -- by name ---------------------------------------------------------------------------

    async def enqueue(
        self, job_name: str, /, deduplication_id: str | None = None, **kwargs: Any
    ) -> str:
        return await self.write_job(new_message(job_name, deduplication_id, kwargs))

    async def enqueue_at(
        self,
        when: datetime | float,
        job_name: str,
        /,
        deduplication_id: str | None = None,
        **kwargs: Any,
    ) -> str:
        message = new_message(job_name, deduplication_id, kwargs, not_before=due_time(when))
        return await self.write_job(message)

    async def enqueue_many(self, jobs: Iterable[BatchJob]) -> list[str]:
        """Insert every job in one statement; each is checked before any is written."""
        now = time.time()
        rows = [row(new_message(j.job_name, j.deduplication_id, dict(j.kwargs)), now) for j in jobs]
        return await self._insert_async(rows) if rows else []

    def enqueue_sync(
        self, job_name: str, /, deduplication_id: str | None = None, **kwargs: Any
    ) -> str:
        """:meth:`enqueue`, blocking."""
        return self.write_job_sync(new_message(job_name, deduplication_id, kwargs))

    def enqueue_at_sync(
        self,
        when: datetime | float,
        job_name: str,
        /,
        deduplication_id: str | None = None,
        **kwargs: Any,
    ) -> str:
        """:meth:`enqueue_at`, blocking."""
        message = new_message(job_name, deduplication_id, kwargs, not_before=due_time(when))
        return self.write_job_sync(message)

    def enqueue_in_sync(
        self,
        delay: timedelta | float,
        job_name: str,
        /,
        deduplication_id: str | None = None,
        **kwargs: Any,
    ) -> str:
        """:meth:`enqueue_in`, blocking."""
        when = time.time() + delay_seconds(delay)
        return self.enqueue_at_sync(when, job_name, deduplication_id, **kwargs)

    # -- the insert ------------------------------------------------------------------------

    async def _insert_async(self, rows: list[dict[str, Any]]) -> list[str]:
        target = self.target
        if _is_django(target):  # its connections are per thread: Django's own hand-over
            sync_to_async: Any = importlib.import_module("asgiref.sync").sync_to_async
            ids: list[str] = await sync_to_async(self._insert_sync)(rows)
            return ids
        if not isinstance(target, AsyncSession | AsyncConnection):
            raise ConfigurationError(
                f"Outbox of a sync {type(target).__name__}: use enqueue_sync (or give "
                "Outbox an AsyncSession or AsyncConnection)"
            )
        await target.execute(sa.insert(outbox), rows)
        return [r["job_id"] for r in rows]

    def _insert_sync(self, rows: list[dict[str, Any]]) -> list[str]:
        target = self.target
        if isinstance(target, AsyncSession | AsyncConnection):
            raise ConfigurationError(
                f"Outbox of an {type(target).__name__}: await enqueue (the sync calls "
                "need a Session or Connection)"
            )
        if _is_django(target):
            _insert_django(target, rows)
        else:
            target.execute(sa.insert(outbox), rows)
        return [r["job_id"] for r in rows]


def _is_django(target: object) -> bool:
    """Whether ``target`` is a Django database connection (known by its shape: the
    outbox does not import Django)."""
    return all(hasattr(target, name) for name in ("vendor", "cursor", "settings_dict"))


def _insert_django(connection: Any, rows: list[dict[str, Any]]) -> None:
    """``rows`` inserted through a Django connection's cursor, in its transaction (an
    ``atomic`` block, or autocommit)."""
    columns = list(rows[0])
    marks = ", ".join(["%s"] * len(columns))
    statement = f"INSERT INTO {TABLE_NAME} ({', '.join(columns)}) VALUES ({marks})"
    with connection.cursor() as cursor:
        cursor.executemany(statement, [tuple(row[c] for c in columns) for row in rows])

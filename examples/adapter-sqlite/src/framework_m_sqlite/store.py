"""The store on SQLite: a row per record in ``fm_records``, a version counter per queue
in ``fm_versions``, each call one ``BEGIN IMMEDIATE`` transaction. Watches poll
(:class:`~framework_m_core.ports.store_base.BaseStore`'s default)."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from framework_m_core.ports.store import ANY, Claim, Record, Write, place_key
from framework_m_core.ports.store_base import BaseStore

Run = Callable[[Callable[[sqlite3.Connection], Any]], Awaitable[Any]]


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``db`` in a ``BEGIN IMMEDIATE`` transaction: committed when the block ends,
    rolled back when it raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


class SqliteStore(BaseStore):
    """The records of one queue; ``run`` runs a function on the broker's connection."""

    def __init__(self, queue: str, run: Run) -> None:
        self._queue = queue
        self._run = run

    def _current(self, db: sqlite3.Connection, key: str, now: float) -> tuple[bytes, int] | None:
        row = db.execute(
            "SELECT value, version FROM fm_records WHERE queue = ? AND key = ? "
            "AND (expires IS NULL OR expires > ?)",
            (self._queue, key, now),
        ).fetchone()
        return None if row is None else (bytes(row[0]), int(row[1]))

    def _next_version(self, db: sqlite3.Connection) -> int:
        db.execute(
            "INSERT INTO fm_versions VALUES (?, 1) "
            "ON CONFLICT (queue) DO UPDATE SET last = last + 1",
            (self._queue,),
        )
        (last,) = db.execute(
            "SELECT last FROM fm_versions WHERE queue = ?", (self._queue,)
        ).fetchone()
        return int(last)

    def _put(self, db: sqlite3.Connection, key: str, value: bytes, expires: float | None) -> int:
        version = self._next_version(db)
        db.execute(
            "INSERT INTO fm_records VALUES (?, ?, ?, ?, ?) ON CONFLICT (queue, key) DO UPDATE "
            "SET value = excluded.value, version = excluded.version, expires = excluded.expires",
            (self._queue, key, value, version, expires),
        )
        return version

    async def _read(self, keys: list[str]) -> list[Record | None]:
        def read(db: sqlite3.Connection) -> list[Record | None]:
            now = time.time()
            found = [self._current(db, key, now) for key in keys]
            return [None if f is None else Record(*f) for f in found]

        result: list[Record | None] = await self._run(read)
        return result

    async def _write(self, writes: list[Write]) -> list[int | None]:
        def write(db: sqlite3.Connection) -> list[int | None]:
            out: list[int | None] = []
            with transaction(db):
                now = time.time()
                for key, value, version, ttl in writes:
                    current = self._current(db, key, now)
                    had = None if current is None else current[1]
                    if version is not ANY and version != had:
                        out.append(None)
                    elif value is None:
                        db.execute(
                            "DELETE FROM fm_records WHERE queue = ? AND key = ?",
                            (self._queue, key),
                        )
                        out.append(had)
                    else:
                        expires = None if ttl is None else now + ttl
                        out.append(self._put(db, key, value, expires))
            return out

        result: list[int | None] = await self._run(write)
        return result

    async def _claim(self, key: str, places: int, value: bytes, ttl: float) -> Claim | None:
        def claim(db: sqlite3.Connection) -> Claim | None:
            with transaction(db):
                now = time.time()
                free = None
                for place in (place_key(key, n) for n in range(places)):
                    current = self._current(db, place, now)
                    if current is not None and current[0] == value:
                        free = place
                        break
                    if current is None and free is None:
                        free = place
                if free is None:
                    return None
                return Claim(free, self._put(db, free, value, now + ttl))

        result: Claim | None = await self._run(claim)
        return result

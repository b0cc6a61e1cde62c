"""The store of ``memory://``: records in the queue's dict, expiry by the monotonic
clock, watches woken by the write itself."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from ...ports.store import ANY, Claim, Record, Write, place_key
from ...ports.store_base import BaseStore
from . import server


class MemoryStore(BaseStore):
    """The records of one in-process queue; ``queue`` raises while not connected."""

    def __init__(self, queue: Callable[[], server.Queue]) -> None:
        self._queue = queue

    async def _read(self, keys: list[str]) -> list[Record | None]:
        q, now = self._queue(), time.monotonic()
        return [q.record(key, now) for key in keys]

    async def _write(self, writes: list[Write]) -> list[int | None]:
        q, now = self._queue(), time.monotonic()
        out: list[int | None] = []
        for key, value, version, ttl in writes:
            current = q.record(key, now)
            if version is not ANY and version != (None if current is None else current.version):
                out.append(None)
                continue
            if value is not None:
                new = Record(value, next(q.versions))
                q.keep_record(key, new, None if ttl is None else now + ttl, now)
                out.append(new.version)
            elif current is None:
                out.append(None)
            else:
                del q.records[key]
                q.wrote_record(key)
                out.append(current.version)
        return out

    async def _claim(self, key: str, places: int, value: bytes, ttl: float) -> Claim | None:
        q, now = self._queue(), time.monotonic()
        free = None
        for place in (place_key(key, n) for n in range(places)):
            record = q.record(place, now)
            if record is not None and record.value == value:
                free = place
                break
            if record is None and free is None:
                free = place
        if free is None:
            return None
        new = Record(value, next(q.versions))
        q.keep_record(free, new, now + ttl, now)
        return Claim(free, new.version)

    async def _watch(self, key: str, version: int | None, timeout: float) -> Record | None:
        q = self._queue()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while _version(q.record(key, time.monotonic())) == version:
                    fut = asyncio.get_running_loop().create_future()
                    q.record_waiters.setdefault(key, set()).add(fut)
                    try:
                        await fut
                    finally:
                        waiting = q.record_waiters.get(key)
                        if waiting is not None:
                            waiting.discard(fut)
                            if not waiting:
                                del q.record_waiters[key]
        return q.record(key, time.monotonic())


def _version(record: Record | None) -> int | None:
    return None if record is None else record.version

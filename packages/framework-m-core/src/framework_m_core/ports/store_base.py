""":class:`BaseStore`, the half of every store that is the same: validation and the
poll a store without change notifications watches by."""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import abstractmethod
from collections.abc import Sequence

from ..errors import BrokerError, InvalidRecordError
from .store import (
    ANY,
    WATCH_DELAY,
    Claim,
    Record,
    StoreProtocol,
    Write,
    validate_key,
    validate_keys,
    validate_places,
    validate_sends,
    validate_timeout,
    validate_ttl,
    validate_value,
    validate_version,
    validate_writes,
)

__all__ = ["POLL", "BaseStore", "NoStore"]

#: How often the default ``BaseStore._watch`` reads the key again, in seconds.
POLL = WATCH_DELAY / 4


class BaseStore(StoreProtocol):
    """Validates every call (:class:`~.errors.InvalidRecordError`, nothing sent) and
    hands the valid ones to the hooks an adapter implements: :meth:`_read`,
    :meth:`_write`, :meth:`_claim`, and ``_watch`` where the broker can notify,
    ``_send`` where it takes writes without answering them."""

    async def read(self, keys: Sequence[str]) -> list[Record | None]:
        valid = validate_keys(keys)
        return await self._read(valid) if valid else []

    async def write(self, writes: Sequence[Write]) -> list[int | None]:
        valid = validate_writes(writes)
        return await self._write(valid) if valid else []

    async def send(self, writes: Sequence[Write]) -> None:
        valid = validate_sends(writes)
        if valid:
            await self._send(valid)

    async def claim(self, key: str, places: int, value: bytes, ttl: float) -> Claim | None:
        key, places = validate_places(key, places)
        return await self._claim(key, places, validate_value(value), validate_ttl(ttl))

    async def watch(self, key: str, version: int | None, *, timeout: float) -> Record | None:
        key, timeout = validate_key(key), validate_timeout(timeout)
        if validate_version(version) is ANY:
            raise InvalidRecordError("a watch waits for a change from a version or None")
        return await self._watch(key, version, timeout)

    @abstractmethod
    async def _read(self, keys: list[str]) -> list[Record | None]:
        """:meth:`read` of at least one valid key."""

    @abstractmethod
    async def _write(self, writes: list[Write]) -> list[int | None]:
        """:meth:`write` of at least one valid write (a delete has no ttl)."""

    @abstractmethod
    async def _claim(self, key: str, places: int, value: bytes, ttl: float) -> Claim | None:
        """:meth:`claim` of 1 to MAX_PLACES places of a valid key."""

    async def _send(self, writes: list[Write]) -> None:
        """:meth:`send` of at least one valid unconditional write. This default is
        :meth:`_write`; a store whose broker takes a write without answering it
        overrides it."""
        await self._write(writes)

    async def _watch(self, key: str, version: int | None, timeout: float) -> Record | None:
        """:meth:`watch` with valid arguments. This default reads the key every
        :data:`POLL` seconds, within the :data:`~.store.WATCH_DELAY` the port promises;
        a store whose broker notifies of changes overrides it, waiting with
        :meth:`_watch_by`."""
        return await self._watch_by(key, version, time.monotonic() + timeout, None, POLL)

    async def _watch_by(
        self,
        key: str,
        version: int | None,
        deadline: float,
        changed: asyncio.Event | None,
        reread: float,
    ) -> Record | None:
        """Read ``key`` until its version is other than ``version`` or the ``deadline``
        (by the monotonic clock) passed, reading again when ``changed`` is set (the
        broker said the key changed) and every ``reread`` seconds in any case."""
        while True:
            if changed is not None:
                changed.clear()
            (record,) = await self._read([key])
            left = deadline - time.monotonic()
            if _version(record) != version or left <= 0:
                return record
            if changed is None:
                await asyncio.sleep(min(reread, left))
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(left, reread))


def _version(record: Record | None) -> int | None:
    return None if record is None else record.version


class NoStore(BaseStore):
    """The store of a broker that keeps none: every valid call raises
    :class:`~.errors.BrokerError` saying so."""

    def __init__(self, broker: str) -> None:
        self._broker = broker

    def _none(self) -> BrokerError:
        return BrokerError(f"{self._broker} keeps no store")

    async def _read(self, keys: list[str]) -> list[Record | None]:
        raise self._none()

    async def _write(self, writes: list[Write]) -> list[int | None]:
        raise self._none()

    async def _claim(self, key: str, places: int, value: bytes, ttl: float) -> Claim | None:
        raise self._none()

    async def _watch(self, key: str, version: int | None, timeout: float) -> Record | None:
        raise self._none()

"""Leases, state records and memos built on a broker's store (:mod:`~framework_m_core.ports.store`):
what :class:`~framework_m_core.ports.base.BaseBroker` offers every adapter that declares ``store``.

A lease's places are records under :func:`~.keys.lease_places`, each holding its
holder's name, taken by one claim and kept by compare-and-set of the version the claim
(or the last extension) gave. A place is extended and released through the broker
instance that took it, which remembers the place, its version and its ttl. A state
record is a record without a ttl; a memo a record with one.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ports.records import StateEntry
from ..ports.store import ANY, Record, StoreProtocol, Write
from . import keys


class SharedState:
    """The leases, state records and memos of one broker instance, on its ``store``."""

    def __init__(self, store: StoreProtocol) -> None:
        self._store = store
        # (lease key, holder) -> (the place's store key, its version, the ttl)
        self._held: dict[tuple[str, str], tuple[str, int, float]] = {}

    # -- leases --------------------------------------------------------------------------

    async def acquire(self, key: str, holder: str, ttl: float, limit: int) -> bool:
        claim = await self._store.claim(keys.lease(key), limit, holder.encode(), ttl)
        if claim is None:
            self._held.pop((key, holder), None)
            return False
        self._held[(key, holder)] = (claim.key, claim.version, ttl)
        return True

    async def extend(self, key: str, holder: str) -> bool:
        held = self._held.get((key, holder))
        if held is None:
            return False
        place, version, ttl = held
        (new,) = await self._store.write([Write(place, holder.encode(), version, ttl)])
        if new is None:
            new = await self._adopt(place, holder, Write(place, holder.encode(), ttl=ttl))
        if new is None:
            del self._held[(key, holder)]
            return False
        self._held[(key, holder)] = (place, new, ttl)
        return True

    async def release(self, key: str, holder: str) -> bool:
        held = self._held.pop((key, holder), None)
        if held is None:
            return False
        place, version, _ = held
        (gone,) = await self._store.write([Write(place, None, version)])
        if gone is None:
            gone = await self._adopt(place, holder, Write(place, None))
        return gone is not None

    async def _adopt(self, place: str, holder: str, write: Write) -> int | None:
        """``write`` with the place's current version when the place still holds
        ``holder``: a write of ours whose reply was lost moved the version on."""
        (record,) = await self._store.read([place])
        if record is None or record.value != holder.encode():
            return None
        (new,) = await self._store.write([write._replace(version=record.version)])
        return new

    async def holders(self, key: str, limit: int) -> list[str]:
        records = await self._store.read(keys.lease_places(key, limit))
        return [r.value.decode() for r in records if r is not None]

    # -- state records -------------------------------------------------------------------

    async def read_state(self, key: str) -> StateEntry | None:
        (record,) = await self._store.read([keys.state(key)])
        return _entry(record)

    async def write_state(self, key: str, value: bytes, version: int | None) -> int | None:
        (new,) = await self._store.write([Write(keys.state(key), value, version)])
        return new

    async def wait_state(self, key: str, version: int | None, timeout: float) -> StateEntry | None:
        return _entry(await self._store.watch(keys.state(key), version, timeout=timeout))

    # -- memos ---------------------------------------------------------------------------

    async def put_memos(self, puts: Sequence[tuple[str, bytes, float, bool]]) -> list[bool]:
        """Put each ``(key, value, ttl, create)``; for each, whether it was stored."""
        writes = [
            Write(keys.memo(key), value, None if create else ANY, ttl)
            for key, value, ttl, create in puts
        ]
        return [v is not None for v in await self._store.write(writes)]

    async def get_memo(self, key: str) -> bytes | None:
        (record,) = await self._store.read([keys.memo(key)])
        return None if record is None else record.value


def _entry(record: Record | None) -> StateEntry | None:
    return None if record is None else StateEntry(record.value, record.version)

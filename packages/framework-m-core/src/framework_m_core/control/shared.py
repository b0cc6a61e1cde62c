"""Leases, state records and memos, built in core on a broker's store
(:mod:`~framework_m_core.ports.store`): the only way core reaches shared state.

``shared(broker)`` is the one :class:`Shared` of a broker instance. Its calls are
validated (:mod:`.checks`) before anything is sent and raise
:class:`~framework_m_core.errors.BrokerError` on a broker without
:attr:`~framework_m_core.ports.capabilities.Capability.STORE`.

A lease's places are records under :func:`~.keys.lease_places`, each holding its
holder's name, taken by one claim and kept by compare-and-set of the version the claim
(or the last extension) gave; a place is extended and released through the broker
instance that took it, which remembers the place, its version and its ttl. A state
record is a record without a ttl. A memo is a record with one, kept in the broker's
:attr:`~framework_m_core.ports.protocols.BrokerProtocol.expiring_store`.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple
from weakref import WeakKeyDictionary

from ..errors import BrokerError
from ..ports.capabilities import Capability
from ..ports.store import ANY, Record, StoreProtocol, Write
from . import checks, keys

if TYPE_CHECKING:
    from ..ports.protocols import BrokerProtocol

__all__ = ["Shared", "StartLog", "StateEntry", "shared"]


class StartLog(NamedTuple):
    """A rate's log of starts as :meth:`Shared.read_starts` found it."""

    starts: tuple[float, ...]
    version: int | None


class StateEntry(NamedTuple):
    """A state record as :meth:`Shared.read_state` found it."""

    value: bytes
    version: int


_OF: WeakKeyDictionary[BrokerProtocol, Shared] = WeakKeyDictionary()


def shared(broker: BrokerProtocol) -> Shared:
    """The leases, state records and memos of ``broker`` (one :class:`Shared` per
    broker instance, so a lease taken through it is extended and released through it)."""
    found = _OF.get(broker)
    if found is None:
        found = _OF[broker] = Shared(broker)
    return found


class Shared:
    """The control plane's shared state on one broker instance's store."""

    def __init__(self, broker: BrokerProtocol) -> None:
        self._ref = weakref.ref(broker)  # not the broker itself: it is this one's key
        # (lease key, holder) -> (the place's store key, its version, the ttl)
        self._held: dict[tuple[str, str], tuple[str, int, float]] = {}

    @property
    def _broker(self) -> BrokerProtocol:
        broker = self._ref()
        if broker is None:
            raise BrokerError("the broker of these leases and records is gone")
        return broker

    @property
    def on(self) -> bool:
        """Whether the broker keeps shared state (:attr:`~.Capability.STORE`)."""
        return Capability.STORE in self._broker.capabilities

    def _store(self) -> StoreProtocol:
        if not self.on:
            raise BrokerError(f"{self._broker.display_url} keeps no shared state (no store)")
        return self._broker.store

    def _expiring(self) -> StoreProtocol:
        self._store()
        return self._broker.expiring_store

    # -- leases --------------------------------------------------------------------------

    async def acquire_lease(self, key: str, holder: str, ttl: float, *, limit: int = 1) -> bool:
        """Take a place under ``key`` for ``holder`` for ``ttl`` seconds; True when it
        holds one. Never more than ``limit`` holders at once; a holder acquiring again
        keeps its one place, renewed."""
        key, holder = checks.lease_text("key", key), checks.lease_text("holder", holder)
        ttl, limit = checks.lease_ttl(ttl), checks.lease_limit(limit)
        claim = await self._store().claim(keys.lease(key), limit, holder.encode(), ttl)
        if claim is None:
            self._held.pop((key, holder), None)
            return False
        self._held[(key, holder)] = (claim.key, claim.version, ttl)
        return True

    async def extend_lease(self, key: str, holder: str) -> bool:
        """Renew ``holder``'s place under ``key`` for the ttl it was acquired with; True
        when it still held it (False: released, expired or never taken here)."""
        key, holder = checks.lease_text("key", key), checks.lease_text("holder", holder)
        store = self._store()
        held = self._held.get((key, holder))
        if held is None:
            return False
        place, version, ttl = held
        (new,) = await store.write([Write(place, holder.encode(), version, ttl)])
        if new is None:
            new = await self._adopt(place, holder, Write(place, holder.encode(), ttl=ttl))
        if new is None:
            del self._held[(key, holder)]
            return False
        self._held[(key, holder)] = (place, new, ttl)
        return True

    async def release_lease(self, key: str, holder: str) -> bool:
        """Free ``holder``'s place under ``key`` at once; True when it held one."""
        key, holder = checks.lease_text("key", key), checks.lease_text("holder", holder)
        store = self._store()
        held = self._held.pop((key, holder), None)
        if held is None:
            return False
        place, version, _ = held
        (gone,) = await store.write([Write(place, None, version)])
        if gone is None:
            gone = await self._adopt(place, holder, Write(place, None))
        return gone is not None

    async def _adopt(self, place: str, holder: str, write: Write) -> int | None:
        """``write`` with the place's current version when the place still holds
        ``holder``: a write of ours whose reply was lost moved the version on."""
        (record,) = await self._store().read([place])
        if record is None or record.value != holder.encode():
            return None
        (new,) = await self._store().write([write._replace(version=record.version)])
        return new

    async def lease_holders(self, key: str, *, limit: int = 1) -> list[str]:
        """The holders of unexpired places under ``key`` (of ``limit`` places) now."""
        key, limit = checks.lease_text("key", key), checks.lease_limit(limit)
        places = keys.lease_places(key, limit)
        records = await self._store().read(places)
        return [r.value.decode() for r in records if r is not None]

    # -- rates: each key's log of starts --------------------------------------------------

    async def read_starts(self, key: str) -> StartLog:
        """The starts logged under ``key`` (unix times, by the clocks of the replicas
        that logged them) and the log's version (None: no log)."""
        name = keys.memo(checks.memo_key(key))
        (record,) = await self._expiring().read([name])
        if record is None:
            return StartLog((), None)
        return StartLog(_starts(record.value), record.version)

    async def write_starts(
        self, key: str, starts: Sequence[float], version: int | None, *, ttl: float
    ) -> int | None:
        """Log ``starts`` under ``key`` for ``ttl`` seconds when the log's version is
        still ``version`` (None: when there is none); the new version, or None when
        another write came first."""
        value = " ".join(f"{start:.3f}" for start in starts).encode()
        condition = checks.state_version(version)
        write = Write(
            keys.memo(checks.memo_key(key)),
            checks.memo_value(value),
            condition,
            checks.memo_ttl(ttl),
        )
        (new,) = await self._expiring().write([write])
        return new

    # -- state records -------------------------------------------------------------------

    async def read_state(self, key: str) -> StateEntry | None:
        """The record under ``key`` as last written, or None."""
        name = keys.state(checks.state_key(key))
        (record,) = await self._store().read([name])
        return _entry(record)

    async def write_state(self, key: str, value: bytes, *, version: int | None) -> int | None:
        """Store ``value`` under ``key`` when its version is ``version`` (None: when it
        has no record); the new version, or None when another write came first."""
        write = Write(
            keys.state(checks.state_key(key)),
            checks.state_value(value),
            checks.state_version(version),
        )
        (new,) = await self._store().write([write])
        return new

    async def wait_state(
        self, key: str, version: int | None, *, timeout: float
    ) -> StateEntry | None:
        """The record under ``key`` once its version is other than ``version``, or as it
        is at the timeout (a watch of the store: within ``WATCH_DELAY`` of a write)."""
        key, version = checks.state_key(key), checks.state_version(version)
        timeout = checks.state_wait(timeout)
        return _entry(await self._store().watch(keys.state(key), version, timeout=timeout))

    # -- memos ---------------------------------------------------------------------------

    async def put_memo(self, key: str, value: bytes, *, ttl: float, create: bool = False) -> bool:
        """Keep ``value`` under ``key`` for ``ttl`` seconds; True when stored. With
        ``create``, only where the key holds no unexpired memo."""
        (stored,) = await self.put_memos([(key, value, ttl, create)])
        return stored

    async def put_memos(self, puts: Sequence[tuple[str, bytes, float, bool]]) -> list[bool]:
        """:meth:`put_memo` of each ``(key, value, ttl, create)`` in one store call."""
        writes = [
            Write(
                keys.memo(checks.memo_key(key)),
                checks.memo_value(value),
                None if create else ANY,
                checks.memo_ttl(ttl),
            )
            for key, value, ttl, create in puts
        ]
        return [v is not None for v in await self._expiring().write(writes)]

    async def send_memos(self, puts: Sequence[tuple[str, bytes, float]]) -> None:
        """Keep each ``(key, value, ttl)`` as :meth:`put_memo` would, in one
        :meth:`~.StoreProtocol.send` (not waiting to learn that it landed)."""
        writes = [
            Write(
                keys.memo(checks.memo_key(key)), checks.memo_value(value), ANY, checks.memo_ttl(ttl)
            )
            for key, value, ttl in puts
        ]
        await self._expiring().send(writes)

    async def delete_memos(self, names: Sequence[str]) -> None:
        """Delete the memos under ``names`` (whatever they hold), in one store call."""
        writes = [Write(keys.memo(checks.memo_key(key)), None) for key in names]
        if writes:
            await self._expiring().write(writes)

    async def get_memo(self, key: str) -> bytes | None:
        """The memo under ``key`` as last put, or None (none, or expired)."""
        (found,) = await self.get_memos([key])
        return found

    async def get_memos(self, names: Sequence[str]) -> list[bytes | None]:
        """:meth:`get_memo` of each of ``names``, in one store call."""
        if not names:
            return []
        records = await self._expiring().read([keys.memo(checks.memo_key(k)) for k in names])
        return [None if record is None else record.value for record in records]


def _starts(value: bytes) -> tuple[float, ...]:
    """The starts of a log as written (a value that does not read as one: none, so the
    next start writes the log anew)."""
    try:
        starts = tuple(float(part) for part in value.split())
    except ValueError:
        return ()
    return starts if all(math.isfinite(start) for start in starts) else ()


def _entry(record: Record | None) -> StateEntry | None:
    return None if record is None else StateEntry(record.value, record.version)

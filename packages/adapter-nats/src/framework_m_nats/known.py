"""What one store knows of the keys it wrote, so a write can skip the read before it.

A bucket key's revision names one write. A store that remembers the revision, expiry
and value of each record it wrote with a ttl can extend or delete it by a
compare-and-set on that revision without reading the key first (a write elsewhere
moved the revision, and the compare-and-set fails as a read would have told). A
delete's marker revision is remembered too, as a *free place*: a claim tries one by
a compare-and-set on it before it reads every place.

A claim may skip its reads only while it knows every live record this store wrote
under its places (else it could take a second place for a value it holds already).
A write whose outcome is unknown (it raised), a write of a place without a ttl,
and a record forgotten to bound the memory, make their key *unsure* until that
record would have expired; a claim over an unsure key reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from collections import OrderedDict
from collections.abc import Iterator
from typing import NamedTuple

from .buckets import now_ms

#: Records, free places and unsure keys remembered at most (each).
MOST = 10_000
#: Free places a claim tries before it reads every place.
TRIES = 3
#: How a place's key ends (:func:`~framework_m_core.ports.store.place_key`).
_PLACE = re.compile(r"#[0-9]+$")


class Mine(NamedTuple):
    """A record this store wrote: its revision, expiry (unix ms) and value."""

    revision: int
    expires: int
    value: bytes


class Known:
    """The records one store wrote, the places it freed and its unsure keys."""

    def __init__(self, *, remember: bool = True) -> None:
        """``remember`` False: a store that never claims keeps no records or places."""
        self._remember = remember
        self._mine: OrderedDict[str, Mine] = OrderedDict()
        self._free: OrderedDict[str, int] = OrderedDict()  # key -> revision to expect
        self._unsure: dict[str, float] = {}  # key -> unix ms it stays unsure until
        self._lost = not remember  # too many unsure keys: every claim reads
        self._writing: dict[str, int] = {}  # key -> writes of it under way
        self._deleting: dict[str, asyncio.Future[None]] = {}  # key -> its delete under way
        #: Writes landed so far: a read begun before the last one may miss it.
        self.landed = 0

    @contextlib.contextmanager
    def writing(self, key: str, value: bytes | None, expires: int) -> Iterator[None]:
        """Around one write of ``key`` (``value`` None: a delete): counted as under way,
        and of unknown outcome when an exception leaves it. The write reports how it
        ended with :meth:`wrote`, :meth:`deleted` or :meth:`missed`."""
        self._writing[key] = self._writing.get(key, 0) + 1
        deleting = None
        if value is None and key not in self._deleting:
            deleting = self._deleting[key] = asyncio.get_running_loop().create_future()
        try:
            yield
        except BaseException:
            self.unknown(key, value, expires)
            raise
        finally:
            self._writing[key] -= 1
            if not self._writing[key]:
                del self._writing[key]
            if deleting is not None:
                del self._deleting[key]
                deleting.set_result(None)

    def under_way(self, key: str) -> bool:
        """Whether a write of ``key`` is under way here."""
        return key in self._writing

    async def deletes_landed(self, keys: list[str]) -> None:
        """Wait for the deletes of ``keys`` under way here (each frees a place)."""
        deleting = [self._deleting[key] for key in keys if key in self._deleting]
        if deleting:
            await asyncio.wait(deleting)

    def mine(self, key: str, version: int) -> Mine | None:
        """The record this store wrote under ``key`` at revision ``version``, if any."""
        own = self._mine.get(key)
        return own if own is not None and own.revision == version else None

    def wrote(self, key: str, value: bytes, expires: int, revision: int) -> None:
        """``value`` landed under ``key`` at ``revision``, expiring at ``expires`` (0:
        never)."""
        self.landed += 1
        if not self._remember:
            return
        self._free.pop(key, None)
        if not expires:
            self._mine.pop(key, None)
            if _PLACE.search(key):
                self._unsure_until(key, math.inf)
            return
        self._unsure.pop(key, None)
        self._mine[key] = Mine(revision, expires, value)
        self._mine.move_to_end(key)
        if len(self._mine) > MOST:
            self._forget_some()

    def deleted(self, key: str, marker: int) -> None:
        """The record under ``key`` was deleted; the delete marker's revision is
        ``marker``."""
        self.landed += 1
        if not self._remember:
            return
        self._mine.pop(key, None)
        self._unsure.pop(key, None)
        self.free(key, marker)

    def free(self, key: str, revision: int) -> None:
        """``key`` was seen without a live record at ``revision`` (0: no entry)."""
        self._free[key] = revision
        self._free.move_to_end(key)
        if len(self._free) > MOST:
            self._free.popitem(last=False)

    def missed(self, key: str) -> None:
        """A conditional write of ``key`` found another revision: what was mine is gone."""
        self._mine.pop(key, None)
        self._free.pop(key, None)

    def unknown(self, key: str, value: bytes | None, expires: int) -> None:
        """A write of ``key`` raised: it may have landed or not."""
        if not self._remember:
            return
        self._mine.pop(key, None)
        self._free.pop(key, None)
        if value is not None and (expires or _PLACE.search(key)):
            self._unsure_until(key, expires or math.inf)

    def held(self, keys: list[str], value: bytes) -> tuple[str, int] | None:
        """A live record of ``value`` this store wrote under one of ``keys`` (a place
        it holds), as key and revision, or None."""
        now = now_ms()
        for key in keys:
            own = self._mine.get(key)
            if own is not None and own.value == value and own.expires > now:
                return key, own.revision
        return None

    def sure(self, keys: list[str]) -> bool:
        """Whether every live record this store wrote under ``keys`` is known."""
        if self._lost:
            return False
        now = now_ms()
        return not any(self._unsure.get(key, 0) > now for key in keys)

    def has_free(self, keys: list[str]) -> bool:
        """Whether a place among ``keys`` is known to be free."""
        return any(key in self._free for key in keys)

    def taken(self, key: str) -> None:
        """``key`` was seen holding a live record."""
        self._free.pop(key, None)

    def take_free(self, keys: list[str]) -> tuple[str, int] | None:
        """The first of ``keys`` known to be free, and the revision to expect there;
        forgotten as free."""
        for key in keys:
            revision = self._free.pop(key, None)
            if revision is not None:
                return key, revision
        return None

    def _forget_some(self) -> None:
        now = now_ms()
        for key in [k for k, own in self._mine.items() if own.expires <= now]:
            del self._mine[key]
        while len(self._mine) > MOST // 2:
            key, own = self._mine.popitem(last=False)
            self._unsure_until(key, own.expires)

    def _unsure_until(self, key: str, until: float) -> None:
        self._unsure[key] = max(until, self._unsure.get(key, 0))
        if len(self._unsure) > MOST:
            now = now_ms()
            self._unsure = {k: t for k, t in self._unsure.items() if t > now}
            if len(self._unsure) > MOST:
                self._lost = True

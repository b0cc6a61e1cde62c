"""The leases of one run, given back as soon as its handler returned.

A run takes its schedule's overlap lease and its place under a limit before its handler
starts (:mod:`.execution`). Both are given back the moment the handler returns, beside
the writing of its status and the settling of its delivery, not after them: the next
slot of an instant job on a one-second schedule must find the overlap lease free, not
held by a run that only waits for its ack. The place under the limit is kept for the
worker's next run of the key (:mod:`.places`); the other leases are released.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from .places import KeptPlaces


class RunLeases:
    """The leases one run holds (key and holder, in the order taken)."""

    def __init__(
        self,
        places: KeptPlaces,
        release: Callable[[str, str], Awaitable[None]],
        limit: str | None,
        unique: str | None = None,
    ) -> None:
        """``limit`` is the key of the job's limit, whose place is kept, not released;
        ``unique`` the job's unique key, left to the settling (:attr:`final`)."""
        self.held: list[tuple[str, str]] = []
        self._places, self._release, self._limit = places, release, limit
        self.unique = unique
        #: How the run's delivery was settled, for its unique key: True for good (give
        #: it back), False to run again (hold it), None: not settled here (leave it).
        self.final: bool | None = False
        self._left = False
        self._releasing: asyncio.Task[None] | None = None

    def leave(self, *, keep: bool = True) -> None:
        """Give every lease back now (once): keep the limit's place (unless ``keep`` is
        False: the run may have lost it), start releasing the others, last taken
        first."""
        if self._left:
            return
        self._left = True
        others = []
        for key, holder in reversed(self.held):
            if key == self.unique:
                continue
            if key == self._limit and keep:
                self._places.keep(key, holder)
            else:
                others.append((key, holder))
        if others:
            self._releasing = asyncio.get_running_loop().create_task(self._release_all(others))

    async def left(self) -> None:
        """:meth:`leave`, then wait until the releases landed (or failed: a lease not
        released expires with its ttl)."""
        self.leave()
        if self._releasing is not None:
            await asyncio.shield(self._releasing)

    async def _release_all(self, leases: list[tuple[str, str]]) -> None:
        for key, holder in leases:
            await self._release(key, holder)

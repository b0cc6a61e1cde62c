"""Places a worker keeps between its runs of one limited job.

A run of a job with ``concurrency=`` takes a place of the limit's lease (a claim
in the broker) and gives it back when it ends (a delete). In a busy worker the next
run of the same key usually starts a moment later, and would take a place again. So a
run that ends *keeps* its place for :data:`KEEP` seconds: the worker's next run of that
key takes it over without asking the broker, and only a place nobody took over in that
time is released. The limit holds all along (a kept place is still held), and other
replicas wait at most :data:`KEEP` longer for a place.

A kept place is taken over only while it has at least two thirds of its ttl left, so
the new run's first heartbeat (a third of the ttl after it starts) extends it in time.
It keeps the name of the run that took it from the broker: ``lease_holders`` names
that run until the place is extended. Overlap leases are never kept: a schedule's next
slot on another replica must not see the previous run as still running.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from ..control.shared import shared
from ..ports.protocols import BrokerProtocol

log = logging.getLogger("framework_m.worker")

#: Seconds a run's place stays with the worker after the run ended.
KEEP = 0.05


@dataclass(slots=True)
class Kept:
    """A place kept after its run ended."""

    holder: str
    since: float  # time.monotonic() when its run ended


@dataclass(slots=True)
class KeptPlaces:
    """The places of one worker's limited runs: when each was last written (taken or
    extended) and those kept after their runs ended."""

    broker: BrokerProtocol
    # (lease key, holder) -> time.monotonic() before its last claim or extension was sent
    _written: dict[tuple[str, str], float] = field(default_factory=dict)
    _kept: dict[str, list[Kept]] = field(default_factory=dict)  # by lease key, oldest first
    _task: asyncio.Task[None] | None = None
    _releasing: set[asyncio.Task[None]] = field(default_factory=set)

    def take(self, key: str, ttl: float) -> str | None:
        """The holder name of a place under ``key`` kept for this worker's next run, or
        None (take one from the broker). A kept place too old to take over is released."""
        kept = self._kept.get(key)
        now = time.monotonic()
        taken = None
        while kept and taken is None:
            place = kept.pop()  # the newest first
            if now - self._written.get((key, place.holder), -ttl) <= ttl / 3:
                taken = place.holder
            else:
                self._release_soon(key, place.holder)
        if kept is not None and not kept:
            del self._kept[key]
        return taken

    def written(self, key: str, holder: str, at: float) -> None:
        """The place under ``key`` named ``holder`` was taken or extended by a write sent
        at ``at`` (monotonic)."""
        self._written[(key, holder)] = at

    def keep(self, key: str, holder: str) -> None:
        """A run holding ``holder``'s place under ``key`` ended: keep it for :data:`KEEP`."""
        self._kept.setdefault(key, []).append(Kept(holder, time.monotonic()))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._expire())

    def forget(self, key: str, holder: str) -> None:
        """The place is gone (released, or lost at an extension)."""
        self._written.pop((key, holder), None)

    async def _expire(self) -> None:
        """Release each kept place nobody took over within :data:`KEEP`."""
        try:
            while self._kept:
                oldest = min(kept[0].since for kept in self._kept.values() if kept)
                wait = oldest + KEEP - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                    continue
                limit = time.monotonic() - KEEP
                for key in list(self._kept):
                    kept = self._kept[key]
                    while kept and kept[0].since <= limit:
                        self._release_soon(key, kept.pop(0).holder)
                    if not kept:
                        del self._kept[key]
        finally:
            self._task = None

    def _release_soon(self, key: str, holder: str) -> None:
        task = asyncio.get_running_loop().create_task(self._release(key, holder))
        self._releasing.add(task)
        task.add_done_callback(self._releasing.discard)

    async def _release(self, key: str, holder: str) -> None:
        self.forget(key, holder)
        try:
            await shared(self.broker).release_lease(key, holder)
        except Exception as exc:  # it expires with its ttl
            log.warning("releasing lease %s failed (%s); it expires by itself", key, exc)

    async def release_all(self) -> None:
        """Release every kept place now (the worker stops), and wait for the releases
        under way."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        kept, self._kept = self._kept, {}
        for key, places in kept.items():
            for place in places:
                self._release_soon(key, place.holder)
        if self._releasing:
            await asyncio.gather(*self._releasing, return_exceptions=True)

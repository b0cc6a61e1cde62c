"""A ticker's view of the runtime schedules: loaded at start, then followed by a watch
where the broker has one, by polling elsewhere."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..control import keys, runtime_schedules
from ..control.runtime_schedules import Catalog, RuntimeSchedule
from ..control.shared import shared
from ..runtime.events import reraise_if_cancelled, said

if TYPE_CHECKING:
    from ..control.shared import StateEntry
    from ..ports.protocols import BrokerProtocol
    from .ticker import Ticker

log = logging.getLogger("framework_m.ticker")

_READ_TIMEOUT = 10.0
#: Seconds at least between two reads of the catalog: a burst of changes is read as
#: a few, and no fault can make a watched wait spin.
_MIN_GAP = 0.05


class RuntimeFollower:
    """Keeps the ticker's runtime entries equal to the broker's runtime schedules.

    It watches the catalog record for at most ``POLL`` seconds
    (:mod:`~framework_m_core.control.runtime_schedules`; the store ends the watch as soon
    as the record changes; after a failure it is read every ``POLL`` seconds until it
    answers again); when its counter moved, it reads the buckets the latest changes name
    (every bucket in use when this replica is further behind, and every ``RESYNC``
    seconds anyway) and puts what changed into the ticker. A broker that does not answer
    is read again ``POLL`` seconds on; the entries stay as they were meanwhile.
    """

    def __init__(
        self,
        ticker: Ticker,
        broker: BrokerProtocol,
        clock: Callable[[], float],
    ) -> None:
        self._ticker = ticker
        self._broker = broker
        self._clock = clock
        self._catalog = Catalog()
        self._version: int | None = None  # of the catalog record last read
        self._known: dict[str, RuntimeSchedule] = {}  # by id: what the ticker has
        self._refused: set[str] = set()  # ids naming a job this app lacks (said once)
        self._resync_at = 0.0
        self._failing = False
        self._closed = asyncio.Event()

    def close(self) -> None:
        """End :meth:`follow` at its next turn (within a poll): a broker client may
        swallow the cancellation of a call it was in."""
        self._closed.set()

    async def load(self) -> None:
        """Read every runtime schedule (at start, before the first slots)."""
        try:
            async with asyncio.timeout(_READ_TIMEOUT):
                await self._sync(
                    await shared(self._broker).read_state(keys.RUNTIME_CATALOG), full=True
                )
        except Exception as exc:
            self._failed(exc)

    async def follow(self) -> None:
        """Put the catalog's changes into the ticker until :meth:`close`."""
        while not self._closed.is_set():
            await asyncio.sleep(_MIN_GAP)
            if self._closed.is_set():
                return
            try:
                async with asyncio.timeout(runtime_schedules.POLL + _READ_TIMEOUT):
                    entry = await self._next_catalog(not self._failing)
                    await self._sync(entry, full=time.monotonic() >= self._resync_at)
            except Exception as exc:
                reraise_if_cancelled()
                self._failed(exc)
            else:
                if self._failing:
                    log.info("runtime schedules: read again")
                    self._failing = False

    async def _next_catalog(self, watch: bool) -> StateEntry | None:
        """The catalog record once it moved from the one last applied (at most ``POLL``
        seconds on), or read ``POLL`` seconds on."""
        if watch:
            return await shared(self._broker).wait_state(
                keys.RUNTIME_CATALOG, self._version, timeout=runtime_schedules.POLL
            )
        await asyncio.sleep(runtime_schedules.POLL)
        return await shared(self._broker).read_state(keys.RUNTIME_CATALOG)

    def _failed(self, exc: BaseException) -> None:
        self._ticker.observer.broker_error("state")
        level = logging.DEBUG if self._failing else logging.WARNING
        log.log(
            level,
            "runtime schedules: could not read them (%s); ticking the ones known",
            said(exc),
        )
        self._failing = True

    async def _sync(self, entry: StateEntry | None, *, full: bool) -> None:
        """Put what the catalog record ``entry`` says changed into the ticker."""
        version = None if entry is None else entry.version
        if not full and version == self._version:
            return  # the catalog did not move: nothing to decode
        catalog = Catalog() if entry is None else runtime_schedules.decode_catalog(entry.value)
        changed = None if full else catalog.changed_since(self._catalog.counter)
        if changed == set():
            self._catalog, self._version = catalog, version
            return
        mine = {runtime_schedules.bucket_of(i) for i in self._known}
        buckets = catalog.used | mine if changed is None else changed
        found = await runtime_schedules.read_buckets(self._broker, buckets)
        for schedule_id in sorted(
            {i for i in self._known if runtime_schedules.bucket_of(i) in buckets}
        ):
            if schedule_id not in found:
                self._drop(schedule_id)
        for schedule_id, schedule in sorted(found.items()):
            if self._known.get(schedule_id) != schedule:
                self._put(schedule)
        self._catalog, self._version = catalog, version
        if changed is None:
            self._resync_at = time.monotonic() + runtime_schedules.RESYNC

    def _put(self, schedule: RuntimeSchedule) -> None:
        from .ticker import Ticked

        spec = self._ticker.spec(schedule.job)
        if spec is None:
            if schedule.id not in self._refused:
                self._refused.add(schedule.id)
                log.warning(
                    "runtime schedule %s names job %r, which this app does not have: "
                    "not ticked here",
                    schedule.id,
                    schedule.job,
                )
            self._drop(schedule.id)
            return
        self._refused.discard(schedule.id)
        entry = Ticked(
            schedule.name,
            schedule.job,
            schedule.schedule,
            schedule.kwargs,
            spec.catchup_window,
            spec.catchup,
        )
        was = self._known.get(schedule.id)
        self._known[schedule.id] = schedule
        self._ticker.put(entry, schedule.name)
        log.info(
            "runtime schedule %s %s: %s",
            schedule.id,
            "changed" if was is not None else "ticked",
            runtime_schedules.describe(schedule),
        )

    def _drop(self, schedule_id: str) -> None:
        if self._known.pop(schedule_id, None) is not None:
            self._ticker.put(None, f"@{schedule_id}")
            log.info("runtime schedule %s deleted: no longer ticked", schedule_id)

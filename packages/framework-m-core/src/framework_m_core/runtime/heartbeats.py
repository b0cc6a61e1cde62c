"""Heartbeats: the reservations of a worker's running jobs, and the leases they hold,
extended every third of the leases' ttl (the visibility timeout, at most
:data:`~framework_m_core.control.leases.LEASE_TTL_MOST`).

One task sweeps them all, and only while some run long enough to need it: a job
that ends before its first extension is due costs two dict operations, no timer
and no task. Every run is due the same interval after it started (or was last
extended), so the runs are kept in due order by appending, and a sweep takes them
from the front.

While runs go on, a plain timer (no task) also checks every half interval for a run
not renewed for a whole lease ttl: the process was frozen or its event loop blocked,
and the broker may have handed the job to another replica. Its fence is lost at once
(:mod:`.fences`). A timer's callback runs in the same pass of the event loop as the
handlers' timers that fell due during the freeze, before their tasks go on: a
handler taken back is cancelled before it takes another step.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from ..control.leases import lease_ttl
from ..control.shared import shared
from ..errors import DeliveryLostError
from ..ports.protocols import BrokerProtocol
from ..ports.records import Delivery
from .fences import Fence
from .places import KeptPlaces

log = logging.getLogger("framework_m.worker")


class Beat:
    """One running job's delivery, and the leases it holds: (key, holder) pairs."""

    __slots__ = ("delivery", "due", "fence", "held", "lost")

    def __init__(
        self,
        delivery: Delivery,
        held: Sequence[tuple[str, str]],
        due: float,
        fence: Fence | None = None,
    ) -> None:
        self.delivery = delivery
        self.held = held
        self.due = due  # time.monotonic() of its next extension
        self.fence = fence  # told of each renewal, and of a loss
        self.lost: set[str] = set()  # leases it was told it no longer holds


class Heartbeats:
    """The heartbeats of one worker's runs, on ``broker``."""

    def __init__(self, broker: BrokerProtocol, places: KeptPlaces | None = None) -> None:
        self._broker = broker
        self._places = places  # told of each extension
        self._beats: dict[int, Beat] = {}  # by id(), oldest due first
        self._task: asyncio.Task[None] | None = None
        self._sleeping = False
        self._freezes: asyncio.TimerHandle | None = None

    @property
    def interval(self) -> float:
        return lease_ttl(self._broker.visibility_timeout) / 3

    def __len__(self) -> int:
        return len(self._beats)

    def start(
        self,
        delivery: Delivery,
        held: Sequence[tuple[str, str]] = (),
        fence: Fence | None = None,
    ) -> Beat:
        """Keep ``delivery`` (and the leases ``held``) reserved until :meth:`stop`;
        ``fence`` learns of each renewal, and is lost when the broker took the delivery
        back or a lease is gone."""
        beat = Beat(delivery, held, time.monotonic() + self.interval, fence)
        self._beats[id(beat)] = beat
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._sweep())
        if fence is not None and self._freezes is None:
            self._freezes = asyncio.get_running_loop().call_later(
                self.interval / 2, self._find_frozen
            )
        return beat

    def stop(self, beat: Beat) -> None:
        """Stop extending ``beat``'s delivery (an extension under way still lands)."""
        self._beats.pop(id(beat), None)
        if not self._beats and self._task is not None and self._sleeping:
            self._task.cancel()  # asleep: no broker call is cut short
            self._task = None

    def _find_frozen(self) -> None:
        """Lose the fence of every run not renewed for a lease ttl; again in half an
        interval while runs go on."""
        self._freezes = None
        ttl = lease_ttl(self._broker.visibility_timeout)
        now = time.monotonic()
        for beat in list(self._beats.values()):
            fence = beat.fence
            if fence is not None and fence.lost is None and now - fence.renewed > ttl:
                fence.lose(
                    f"it was not renewed for {now - fence.renewed:.1f}s, past its "
                    f"lease ttl of {ttl:g}s"
                )
        if self._beats:
            self._freezes = asyncio.get_running_loop().call_later(
                self.interval / 2, self._find_frozen
            )

    async def _sweep(self) -> None:
        me = asyncio.current_task()
        try:
            while self._beats:
                wait = next(iter(self._beats.values())).due - time.monotonic()
                if wait > 0:
                    self._sleeping = True
                    try:
                        await asyncio.sleep(wait)
                    finally:
                        self._sleeping = False
                    continue
                now = time.monotonic()
                due: list[Beat] = []
                for beat in self._beats.values():
                    if beat.due > now:
                        break
                    due.append(beat)
                interval = self.interval
                for beat in due:  # to the back: due again an interval from now
                    del self._beats[id(beat)]
                    beat.due = now + interval
                    self._beats[id(beat)] = beat
                await asyncio.gather(*(self._extend(beat) for beat in due))
        finally:
            if self._task is me:
                self._task = None

    async def _extend(self, beat: Beat) -> None:
        sent = time.monotonic()
        try:
            await self._broker.extend(beat.delivery)
        except DeliveryLostError as exc:
            if beat.fence is not None:
                beat.fence.lose(f"its reservation lapsed and the broker took it back ({exc})")
            return
        except Exception as exc:
            log.warning("could not extend a running job's reservation: %s", exc)
        else:
            if beat.fence is not None:
                beat.fence.renew(sent)
        for key, holder in beat.held:
            await self._extend_lease(beat, key, holder)

    async def _extend_lease(self, beat: Beat, key: str, holder: str) -> None:
        try:
            sent = time.monotonic()
            if await shared(self._broker).extend_lease(key, holder):
                if self._places is not None:
                    self._places.written(key, holder, sent)
                return
            if self._places is not None:
                self._places.forget(key, holder)
            if key in beat.lost:
                return
            beat.lost.add(key)
            if beat.fence is not None:
                beat.fence.lose(f"it lost lease {key} (not extended in time)")
                return
            log.warning(
                "%s lost lease %s (not extended in time): another run may start meanwhile",
                holder,
                key,
            )
        except Exception as exc:
            log.warning("could not extend lease %s: %s", key, exc)

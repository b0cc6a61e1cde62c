"""This replica's clock against the broker's, the one clock all replicas share.

Replicas agree on a slot only while their clocks agree: one ``d`` seconds ahead
enqueues every slot ``d`` seconds early, and two that differ by more than what
the dedup window leaves after grace enqueue the same slot twice. The ticker
measures the offset at start and every :data:`CHECK_EVERY` seconds through the
broker's ``server_time()``: beyond ``--clock-skew`` it warns; beyond
``(dedup_window - grace) / 2`` (so that any two replicas within it of the broker
are within the window of each other) it stops ticking until the clock is back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger("framework_m.ticker")

CHECK_EVERY = 60.0
_MEASURE_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Offset:
    """The broker's clock minus this one, and the bound on the measurement's error."""

    seconds: float
    error: float

    @property
    def at_least(self) -> float:
        """How far apart the clocks are for sure."""
        return max(0.0, abs(self.seconds) - self.error)

    def describe(self) -> str:
        way = "behind" if self.seconds > 0 else "ahead of"
        return f"{abs(self.seconds):.1f}s {way} the broker's"


async def measure(broker: object, clock: Callable[[], float] = time.time) -> Offset | None:
    """The offset to ``broker``'s clock; None when it exposes no clock (``server_time``)."""
    server_time: Callable[[], Awaitable[float | None]] | None = getattr(broker, "server_time", None)
    if server_time is None:
        return None
    before = clock()
    theirs = await server_time()
    after = clock()
    if theirs is None:
        return None
    return Offset(theirs - (before + after) / 2, (after - before) / 2)


class ClockCheck:
    """Whether this replica's clock is fit to tick by, from its latest measurement."""

    def __init__(
        self,
        broker: object,
        *,
        clock_skew: float,
        limit: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._broker = broker
        self._skew = clock_skew
        self.limit = limit
        self._clock = clock
        self.offset: Offset | None = None
        self.halted = False  # ticking stopped: the clock is off by more than limit
        self.next_at = 0.0  # wall time of the next measurement
        self._exposed: bool | None = None

    def due(self) -> bool:
        return self._clock() >= self.next_at

    async def run(self) -> None:
        """Measure once and act on it; a failed measurement keeps the last decision."""
        self.next_at = self._clock() + CHECK_EVERY
        try:
            async with asyncio.timeout(_MEASURE_TIMEOUT):
                offset = await measure(self._broker, self._clock)
        except Exception as exc:  # the broker is out of reach: the ticker says so itself
            log.debug("could not read the broker's clock: %s", exc)
            return
        if offset is None:
            if self._exposed is None:
                log.info("the broker exposes no clock: this replica's clock is not checked")
            self._exposed = False
            return
        self._exposed, self.offset = True, offset
        if offset.at_least > self.limit:
            self.halted = True
            log.error(
                "this clock is %s, more than the %gs the dedup window allows: not ticking "
                "until it is back (this worker still runs jobs); fix its time sync (NTP)",
                offset.describe(),
                self.limit,
            )
        elif offset.at_least > self._skew:
            self._resume(offset)
            log.warning(
                "this clock is %s, more than --clock-skew %gs: its slots fire that much "
                "off time; fix its time sync (NTP)",
                offset.describe(),
                self._skew,
            )
        else:
            self._resume(offset)

    def _resume(self, offset: Offset) -> None:
        if self.halted:
            self.halted = False
            log.warning("this clock is back to %s: ticking again", offset.describe())

"""A run's fence: whether it still holds its delivery, after a freeze as before.

A process frozen past its reservation (a GC pause, a stopped VM, a handler blocking
the event loop) comes back with runs another replica may have taken over: the broker
delivered their jobs again, and the leases they held expired. Such a run must not go
on as if nothing happened.

Each run's fence remembers when its reservation was last renewed: extended by a
heartbeat, or started (by the broker's send where the adapter can bound it, which is
before any freeze that held the delivery unread). One not renewed for half the lease
ttl may have lapsed, or lapse before its first heartbeat: before the run starts its
handler and before it writes its final status and settles, the fence asks the broker
with one extension, which fails once the broker took the delivery back
(:class:`~framework_m_core.errors.DeliveryLostError`). A heartbeat that finds the
reservation or a lease gone marks the fence lost, which stops the handler as a cancel
would (a ``def`` handler sees ``ctx.cancelled``). A lost run writes no status and
settles nothing: whoever holds the job now owns it. Runs renewed in time never pay for
the fence.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from ..errors import DeliveryLostError
from ..ports.protocols import BrokerProtocol
from ..ports.records import Delivery

log = logging.getLogger("framework_m.worker")


class Fence:
    """One run's hold on its delivery."""

    __slots__ = ("_on_lost", "_stale_after", "handle", "lost", "renewed")

    def __init__(self, ttl: float, since: float | None = None, handle: object = None) -> None:
        """``ttl``: seconds a lease of the run lives without an extension; ``since``:
        the monotonic time the reservation may have started (None: now); ``handle``:
        the delivery's, by which the broker names it when it is lost."""
        self._stale_after = ttl / 2
        self.handle = handle
        now = time.monotonic()
        # when the reservation was last renewed
        self.renewed = now if since is None else min(since, now)
        self.lost: str | None = None  # why the run no longer holds its delivery
        self._on_lost: Callable[[], object] | None = None

    def fresh(self) -> bool:
        """Whether the run surely still holds its delivery, without asking."""
        return self.lost is None and time.monotonic() - self.renewed <= self._stale_after

    def renew(self, sent: float) -> None:
        """An extension sent at ``sent`` (monotonic) landed."""
        self.renewed = max(self.renewed, sent)

    def lose(self, why: str) -> None:
        """The run no longer holds its delivery (or a lease): stop its handler."""
        if self.lost is not None:
            return
        self.lost = why
        if self._on_lost is not None:
            self._on_lost()

    def on_lost(self, stop: Callable[[], object] | None) -> None:
        """Call ``stop`` when the fence is lost (at once if it is); None: nothing."""
        self._on_lost = stop
        if stop is not None and self.lost is not None:
            stop()

    async def holds(self, broker: BrokerProtocol, delivery: Delivery) -> bool:
        """Whether the run still holds ``delivery``: at once while fresh, else by
        extending its reservation (a broker that cannot be asked now: assumed held,
        since its settle then fails anyway if it is not)."""
        if self.fresh():
            return True
        if self.lost is not None:
            return False
        sent = time.monotonic()
        try:
            await broker.extend(delivery)
        except DeliveryLostError as exc:
            self.lose(f"its reservation lapsed and the broker took it back ({exc})")
            return False
        except Exception as exc:
            log.warning("could not check a delivery's reservation (%s); going on", exc)
            return True
        self.renew(sent)
        return True

"""When a NATS delivery stops being this consumer's, counted on this side.

JetStream applies an ack that arrives after ``ack_wait`` to whichever delivery of
the message is current, so an ack must not be sent once the reservation may have
ended. The end is counted from when the pull request it answers was sent (or when it
was last extended), which is before the server started its own clock, less a margin.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from nats.aio.client import Client
from nats.aio.msg import Msg

from framework_m_core.ports import DeliveryLostError

# Share of ack_wait by which a reservation is taken to end before the server ends it.
MARGIN = 0.1


def reserved_until(ack_wait: float, since: float | None = None) -> float:
    """The ``time.monotonic()`` by which a delivery whose reservation started (or was
    extended) at ``since`` (None: now) may be delivered again."""
    return (time.monotonic() if since is None else since) + ack_wait * (1 - MARGIN)


@dataclass(slots=True, eq=False)
class Reservation:
    """A delivery's message and when its reservation ends."""

    msg: Msg
    until: float
    client: Client  # the connection it was received on
    settled: bool = False

    def expired(self) -> bool:
        return not self.settled and time.monotonic() >= self.until

    def live(self, ack_wait: float) -> Reservation | None:
        """Itself while reserved; None once settled; DeliveryLostError once expired."""
        if self.settled:
            return None
        if self.client.is_closed:
            raise DeliveryLostError("its connection was closed; JetStream delivers it again")
        if self.expired():
            raise DeliveryLostError(
                f"its ack_wait of {ack_wait:g}s ran out; JetStream delivers it again"
            )
        return self

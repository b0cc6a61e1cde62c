"""Pull requests of framework-m's own on one inbox subscription.

nats-py's ``fetch`` makes a task and a timer for every message it hands over, and
waits for a full batch once the first message arrived. Here a ``receive`` asks the
consumer (``$JS.API.CONSUMER.MSG.NEXT``) for what its caller has room for and the
requests already open do not cover, then hands over whatever has arrived, waiting
(one timer a receive) only when nothing has. Messages arrive in one subscription
callback that appends them to a buffer.

A request carries ``no_wait`` with its ``expires``: the server waits (up to
``expires``) for the first message, then delivers what is ready and ends the request
at once, so none lingers to take messages nobody asked for any more.

Every request has its own reply subject (``{inbox}.{n}``) so that the status that
ends it (404 no messages, 408 expired, 409 conflict) is told apart from those of
earlier requests. A 408 says how many of its batch it did not deliver
(``Nats-Pending-Messages``), which the count of messages still owed drops by;
a request whose end never came (a reconnect lost it) is forgotten a little after
it expired. Messages owed and buffered never exceed what the caller last had room
for, so a worker holds no more jobs than it has free slots; messages that arrive
after a receive returned wait in the buffer for the next one.

A message's ack_wait clock started when the server sent it, which is its arrival in a
process that kept running. A process frozen meanwhile (SIGSTOP, a stopped VM, an
event loop blocked) reads it later, with less of its reservation left than its
arrival says. While requests are open a timer notes each gap in the event loop (which
does not count toward forgetting a request); a message read after a gap counts from
the gap's start, or from when its request was sent if that is later: the server
serves open requests in the order they came, each until its batch is delivered or it
ends, so it is counted against the oldest request still owed messages.
"""

from __future__ import annotations

import asyncio
import collections
import json
import time
from dataclasses import dataclass

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from framework_m_core.ports import BrokerError

_STATUS = "Status"
_DESCRIPTION = "Description"
_PENDING = "Nats-Pending-Messages"
# Share of ack_wait between two looks at the event loop while requests are open; a
# look that comes later than twice that marks a gap (a freeze).
LOOK_EVERY = 0.1
# Seconds after a request's expiry by which its end is taken as lost.
_LOST_AFTER = 1.0
# Conflicts (409) that end a request without anything being wrong with the consumer.
_PASSING = ("exceeded maxwaiting", "leadership change", "exceeds maxbytes", "batch completed")


@dataclass(slots=True)
class _Request:
    """An open pull request: messages it is still owed, when it was sent, and when it
    is taken as lost."""

    owed: int
    sent: float
    forget_at: float


class PullConsumer:
    """The pull requests of one connection to one durable consumer."""

    def __init__(self, nc: Client, stream: str, consumer: str, ack_wait: float) -> None:
        self._nc = nc
        self._ack_wait = ack_wait
        self._look_every = min(0.5, ack_wait * LOOK_EVERY)
        self._looked = time.monotonic()  # when the timer last looked
        self._gap: tuple[float, float] | None = None  # the event loop's last gap
        self._looking: asyncio.TimerHandle | None = None
        self._next = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self._inbox = nc.new_inbox()
        self._sub: Subscription | None = None
        self._ready: collections.deque[tuple[Msg, float]] = collections.deque()  # and since
        self._open: dict[str, _Request] = {}  # by reply subject, oldest first
        self._owed = 0  # messages asked for by open requests and not delivered yet
        self._count = 0
        self._arrived = asyncio.Event()
        self._error: BrokerError | None = None

    @property
    def buffered(self) -> int:
        return len(self._ready)

    async def start(self) -> None:
        if self._sub is None:
            self._sub = await self._nc.subscribe(f"{self._inbox}.*", cb=self._on_msg)

    async def receive(self, max_messages: int, timeout: float) -> list[tuple[Msg, float]]:
        """Up to ``max_messages`` messages, each with the ``time.monotonic()`` its request
        was sent (the server's ack_wait clock started no earlier): those already here, else
        the first to arrive within ``timeout`` seconds (and any with it); ``[]`` when
        none did. Asks the server only when it will wait: what it asks for then arrives
        before it returns or waits in the buffer for the next call."""
        await self.start()
        if not self._ready:
            deadline = time.monotonic() + timeout
            try:
                async with asyncio.timeout(timeout):
                    while not self._ready:
                        self._raise_error()
                        self._forget_lost()
                        want = max_messages - self._owed
                        if want > 0:
                            left = max(deadline - time.monotonic(), 0.01)
                            await self._ask(want, left)
                        self._arrived.clear()
                        await self._arrived.wait()  # a message, a request's end, an error
            except TimeoutError:
                self._raise_error()
                return []
        out: list[tuple[Msg, float]] = []
        while self._ready and len(out) < max_messages:
            out.append(self._ready.popleft())
        return out

    def take_all(self) -> list[Msg]:
        """The messages buffered and not handed over (to hand back on close)."""
        out = [msg for msg, _ in self._ready]
        self._ready.clear()
        return out

    async def stop(self) -> None:
        """Unsubscribe: requests still open deliver nothing more to this connection."""
        sub, self._sub = self._sub, None
        self._open.clear()
        if self._looking is not None:
            self._looking.cancel()
            self._looking = None
        self._owed = 0
        if sub is not None:
            await sub.unsubscribe()

    async def _ask(self, batch: int, expires: float) -> None:
        self._count += 1
        reply = f"{self._inbox}.{self._count}"
        request = {"batch": batch, "expires": int(expires * 1e9), "no_wait": True}
        now = time.monotonic()
        self._open[reply] = _Request(batch, now, now + expires + _LOST_AFTER)
        if self._looking is None:  # no request was open: the loop was not watched
            self._looked = now
            self._watch()
        self._owed += batch
        await self._nc.publish(self._next, json.dumps(request).encode(), reply=reply)

    def _forget_lost(self) -> None:
        now = self._look()
        for reply, request in list(self._open.items()):
            if request.forget_at <= now:
                del self._open[reply]
        if not self._open:
            self._owed = 0

    def _answered(self) -> float:
        """When the ack_wait clock of a message that just arrived may have started: its
        arrival, or where the event loop had a gap since its request (the oldest owed
        messages, which then owes one less) was sent, the gap's start or the request's
        sending, whichever is later. A message no open request accounts for (its
        request was forgotten) is taken as sent an ack_wait ago: checked before use."""
        now = self._look()
        for reply, request in self._open.items():
            if request.owed > 0:
                request.owed -= 1
                if request.owed == 0:
                    del self._open[reply]  # served in full: no status ends it
                if self._gap is not None and self._gap[1] > request.sent:
                    return max(request.sent, self._gap[0])
                return now
        return now - self._ack_wait

    def _look(self) -> float:
        """Note a gap in the event loop since the last look; now (monotonic)."""
        now = time.monotonic()
        if now - self._looked > 2 * self._look_every:
            self._gap = (self._looked, now)
            for request in self._open.values():  # a freeze does not count toward its end
                request.forget_at += now - self._looked
        self._looked = now
        return now

    def _keep_looking(self) -> None:
        """The timer: look, and again soon while requests are open."""
        self._look()
        self._looking = None
        if self._open:
            self._watch()

    def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        self._looking = loop.call_later(self._look_every, self._keep_looking)

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    async def _on_msg(self, msg: Msg) -> None:
        headers = msg.headers
        status = headers.get(_STATUS) if headers else None
        if not status and msg.reply:
            self._ready.append((msg, self._answered()))
            self._owed = max(0, self._owed - 1)
            self._arrived.set()
            return
        if status == "100" or not status:  # an idle heartbeat or flow control
            return
        asked = self._open.pop(msg.subject, None)
        if asked is not None:
            undelivered = _int(headers.get(_PENDING) if headers else None, asked.owed)
            self._owed = max(0, self._owed - undelivered)
        if not self._open:
            self._owed = 0
        if status in ("404", "408"):
            self._arrived.set()  # a receive still waiting asks again
            return
        description = (headers.get(_DESCRIPTION, "") if headers else "") or ""
        if status == "409" and description.lower().startswith(_PASSING):
            return  # not woken: asking again at once would meet the same conflict
        if status == "503":
            why = "JetStream or the consumer is not there (run schema sync; start nats-server -js)"
        else:
            why = f"{description or 'no description'} (status {status})"
        self._error = BrokerError(f"fetch failed: {why}")
        self._arrived.set()


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default

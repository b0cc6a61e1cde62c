"""Pull fetches that hand over what is ready without waiting for a full batch.

nats-py's ``fetch(n)`` returns at once when messages are ready but, when none
are, waits for all ``n`` (or its timeout) once the first arrives. So a long
poll asks for one message; the rest of a batch is asked for only when the
server says more are pending: every delivery's metadata carries the consumer's
``num_pending``, which the next receive also uses to skip the long poll.
"""

from __future__ import annotations

import asyncio
import contextlib

from nats.aio.msg import Msg
from nats.js import JetStreamContext

# Longest wait for messages the server said were pending (another worker may have
# taken them); messages that arrive later wait in the subscription for the next fetch.
FILL_TIMEOUT = 0.05


def pending_after(msgs: list[Msg]) -> int:
    """How many more messages the consumer had ready after the last of ``msgs``."""
    if not msgs or msgs[-1].metadata.num_pending is None:
        return 0
    return msgs[-1].metadata.num_pending


async def fetch(
    psub: JetStreamContext.PullSubscription, max_messages: int, timeout: float, pending: int
) -> list[Msg]:
    """Up to ``max_messages``: at once when ``pending`` (or the first message) says more
    are ready, else after a long poll of up to ``timeout`` seconds for the first one.

    Raises ``TimeoutError`` when nothing arrived.
    """
    msgs: list[Msg] = []
    if pending > 0:
        with contextlib.suppress(TimeoutError):  # nats-py's own TimeoutError derives from it
            msgs = await psub.fetch(min(max_messages, pending), timeout=FILL_TIMEOUT)
    if not msgs:
        msgs = await psub.fetch(1, timeout=max(timeout, 0.01))
    more = min(max_messages - len(msgs), pending_after(msgs))
    if more > 0:
        try:
            msgs += await psub.fetch(more, timeout=FILL_TIMEOUT)
        except TimeoutError:
            pass
        except asyncio.CancelledError:  # release what was taken, not left to ack_wait
            await asyncio.shield(asyncio.gather(*(m.nak() for m in msgs)))
            raise
    return msgs

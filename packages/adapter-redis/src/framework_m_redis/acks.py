"""The acks of one event-loop pass, sent to Redis as one call of the ACK script.

A worker that finishes many jobs at once acks them in one round trip instead of
one each. Every caller still waits for its own entry's answer, so a job counts
as done only once Redis has its ack; a call that fails fails every ack it
carried, and the worker retries each, so at-least-once holds job by job.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

from framework_m_core.batching import Calls, PassBatch, answer

# Entries one call carries at most (Lua's unpack() takes a few thousand values).
MOST = 500

E = TypeVar("E", bound=Hashable)


class AckBatch(Generic[E]):
    """``await ack(entry)`` returns the script's code for ``entry``; the acks made
    before the event loop next runs the batch's task go in the same call."""

    def __init__(self, send: Callable[[Sequence[E]], Awaitable[Sequence[int]]]) -> None:
        self._send = send  # one call with these entries -> one code per entry, in order
        self._batch: PassBatch[E, int] = PassBatch(self._flush, most=MOST)

    async def ack(self, entry: E) -> int:
        """The code the script gave ``entry``; raises what the call raised."""
        return await self._batch.submit(entry)

    async def _flush(self, calls: Calls[E, int]) -> None:
        codes = await self._send([entry for entry, _ in calls])
        for (_, future), code in zip(calls, codes, strict=True):
            answer(future, int(code))

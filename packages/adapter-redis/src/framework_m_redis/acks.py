"""The acks of one event-loop pass, sent to Redis as one call of the ACK script.

A worker that finishes many jobs at once acks them in one round trip instead of
one each. Every caller still waits for its own entry's answer, so a job counts
as done only once Redis has its ack; a call that fails fails every ack it
carried, and the worker retries each, so at-least-once holds job by job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

# Entries one call carries at most (Lua's unpack() takes a few thousand values).
MOST = 500

E = TypeVar("E", bound=Hashable)
_Waiting = tuple[E, "asyncio.Future[int]"]


class AckBatch(Generic[E]):
    """``await ack(entry)`` returns the script's code for ``entry``; the acks made
    before the event loop next runs the batch's task go in the same call."""

    def __init__(self, send: Callable[[Sequence[E]], Awaitable[Sequence[int]]]) -> None:
        self._send = send  # one call with these entries -> one code per entry, in order
        self._waiting: list[_Waiting[E]] = []
        self._sending: set[asyncio.Task[None]] = set()
        self._scheduled = False

    async def ack(self, entry: E) -> int:
        """The code the script gave ``entry``; raises what the call raised."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.append((entry, future))
        if not self._scheduled:
            self._schedule()
        return await future

    def _schedule(self) -> None:
        self._scheduled = True
        task = asyncio.create_task(self._flush())
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _flush(self) -> None:
        self._scheduled = False
        batch, self._waiting = self._waiting[:MOST], self._waiting[MOST:]
        if self._waiting:  # more than one call carries: the rest go in the next
            self._schedule()
        try:
            codes = await self._send([entry for entry, _ in batch])
        except BaseException as exc:
            failure = exc if isinstance(exc, Exception) else ConnectionError("ack cancelled")
            for _, future in batch:
                if not future.done():
                    future.set_exception(failure)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future), code in zip(batch, codes, strict=True):
            if not future.done():  # done: its caller was cancelled
                future.set_result(int(code))

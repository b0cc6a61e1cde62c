"""Calls made in one pass of the event loop, handled together.

An adapter whose broker settles many deliveries in one round trip or one frame
(a Redis script over many entries, an AMQP ack with ``multiple``) collects the
calls of a pass here. Each caller awaits its own answer; ``flush`` gets the
calls once the event loop next runs the batch's task, and settles each one's
future. Whatever ``flush`` raises reaches every caller it left unanswered.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

Calls = list[tuple[T, "asyncio.Future[R]"]]


class PassBatch(Generic[T, R]):
    """``await submit(item)`` answers with what ``flush`` set for ``item``; ``flush``
    gets at most ``most`` calls at a time, in the order they were made."""

    def __init__(
        self, flush: Callable[[Calls[T, R]], Awaitable[None]], most: int | None = None
    ) -> None:
        self._flush = flush
        self._most = most
        self._waiting: Calls[T, R] = []
        self._running: set[asyncio.Task[None]] = set()
        self._scheduled = False

    async def submit(self, item: T) -> R:
        """``item``'s answer, once its batch was flushed; raises what the flush raised."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if not self._scheduled:
            self._schedule()
        return await future

    def _schedule(self) -> None:
        self._scheduled = True
        task = asyncio.create_task(self._run())
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run(self) -> None:
        self._scheduled = False
        cut = len(self._waiting) if self._most is None else self._most
        calls, self._waiting = self._waiting[:cut], self._waiting[cut:]
        if self._waiting:  # more than one flush takes: the rest go in the next
            self._schedule()
        with failing_all(calls):
            await self._flush(calls)


@contextlib.contextmanager
def failing_all(calls: Calls[T, R]) -> Iterator[None]:
    """What the block raises goes to every call of ``calls`` it left unanswered, and no
    further; a cancellation reaches them as ConnectionError and goes on."""
    try:
        yield
    except BaseException as exc:
        failure = exc if isinstance(exc, Exception) else ConnectionError("cancelled")
        for _, future in calls:
            answer(future, failure)
        if not isinstance(exc, Exception):
            raise


def answer(future: asyncio.Future[R], result: R | Exception) -> None:
    """Set ``future``'s result, or its exception when ``result`` is one; a future whose
    caller was cancelled is left alone."""
    if future.done():
        return
    if isinstance(result, Exception):
        future.set_exception(result)
    else:
        future.set_result(result)

"""Waiting on asyncio events."""

from __future__ import annotations

import asyncio
from typing import Any


async def first_of(*events: asyncio.Event) -> None:
    """Return once any of ``events`` is set (the other waits are cancelled)."""
    tasks = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def reraise_if_cancelled() -> None:
    """Raise ``CancelledError`` when the running task was asked to stop.

    A client library that turns a cancellation into an error of its own (some do,
    on a request cut short) would make a loop that catches ``Exception`` go on
    forever after its owner cancelled it; such loops call this in their handler.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def said(exc: BaseException) -> str:
    """What ``exc`` says, or its type's name when it says nothing (a bare TimeoutError)."""
    return str(exc) or type(exc).__name__


def retrieved(future: asyncio.Future[Any]) -> None:
    """A done callback marking ``future``'s exception as seen: a future whose waiters
    gave up (``asyncio.shield`` cancelled by a timeout) is not reported as never
    retrieved when it fails later."""
    if not future.cancelled():
        future.exception()

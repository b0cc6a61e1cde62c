"""Waiting on asyncio events."""

from __future__ import annotations

import asyncio


async def first_of(*events: asyncio.Event) -> None:
    """Return once any of ``events`` is set (the other waits are cancelled)."""
    tasks = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

"""A store that passes every call on to another: subclass it to count calls or to
inject faults in a test, and give it to a broker in place of its own store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ..ports.store import Claim, Record, StoreProtocol, Write


class PassingStore(StoreProtocol):
    """Every call goes to ``inner`` as it came (its contract is ``inner``'s)."""

    def __init__(self, inner: StoreProtocol) -> None:
        self.inner = inner

    async def read(self, keys: Sequence[str]) -> list[Record | None]:
        """``inner.read(keys)``."""
        return await self.inner.read(keys)

    async def write(self, writes: Sequence[Write]) -> list[int | None]:
        """``inner.write(writes)``."""
        return await self.inner.write(writes)

    async def send(self, writes: Sequence[Write]) -> None:
        """``inner.send(writes)``."""
        await self.inner.send(writes)

    async def claim(self, key: str, places: int, value: bytes, ttl: float) -> Claim | None:
        """``inner.claim(key, places, value, ttl)``."""
        return await self.inner.claim(key, places, value, ttl)

    async def watch(self, key: str, version: int | None, *, timeout: float) -> Record | None:
        """``inner.watch(key, version, timeout=timeout)``."""
        return await self.inner.watch(key, version, timeout=timeout)


class DeafStore(PassingStore):
    """A store whose client swallows the cancellation of a watch whole (and uncancels
    its task), as some clients' waits do: what stops a watcher must not rely on the
    cancellation reaching it. Counts its watches in ``waits``."""

    waits = 0

    async def watch(self, key: str, version: int | None, *, timeout: float) -> Record | None:
        """``inner.watch``, returning None where it was cancelled."""
        self.waits += 1
        try:
            return await super().watch(key, version, timeout=timeout)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            return None

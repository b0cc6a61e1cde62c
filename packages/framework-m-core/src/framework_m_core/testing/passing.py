"""A store that passes every call on to another: subclass it to count calls or to
inject faults in a test, and give it to a broker in place of its own store."""

from __future__ import annotations

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

    async def claim(self, key: str, places: int, value: bytes, ttl: float) -> Claim | None:
        """``inner.claim(key, places, value, ttl)``."""
        return await self.inner.claim(key, places, value, ttl)

    async def watch(self, key: str, version: int | None, *, timeout: float) -> Record | None:
        """``inner.watch(key, version, timeout=timeout)``."""
        return await self.inner.watch(key, version, timeout=timeout)

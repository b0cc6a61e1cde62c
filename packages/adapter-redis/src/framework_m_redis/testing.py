"""``redis://`` namespaces for tests and benchmarks: a queue (and so a key prefix) of their own."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from framework_m_core.testing.namespaces import Namespace, with_options


class RedisNamespace(Namespace):
    """The keys ``fm:{fmtest_<tag>}:*`` on ``server`` (a plain redis:// URL)."""

    def url(self, **options: Any) -> str:
        return with_options(self.server, queue=self.name, **options)

    async def drop(self) -> None:
        """Delete every key of the queue (on a single server: what the tests start)."""
        client = aioredis.Redis.from_url(self.server)
        try:
            keys = [k async for k in client.scan_iter(match=f"fm:{{{self.name}}}:*", count=1000)]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()

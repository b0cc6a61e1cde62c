"""``redis://`` namespaces for tests and benchmarks: a queue (and so a key prefix) of their own."""

from __future__ import annotations

from typing import Any

from framework_m_core.testing.namespaces import Namespace, with_options

from .connection import close_client, open_client
from .settings import parse_url


class RedisNamespace(Namespace):
    """The keys ``fm:{fmtest_<tag>}:*`` on ``server`` (a redis:// URL, or a
    redis+sentinel:// one for the primary)."""

    def url(self, **options: Any) -> str:
        return with_options(self.server, queue=self.name, **options)

    async def drop(self) -> None:
        """Delete every key of the queue (on a single server: what the tests start)."""
        client = await open_client(parse_url(self.server))
        try:
            keys = [k async for k in client.scan_iter(match=f"fm:{{{self.name}}}:*", count=1000)]
            if keys:
                await client.delete(*keys)
        finally:
            await close_client(client)

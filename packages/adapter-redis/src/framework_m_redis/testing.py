"""Helpers for tests that run framework-m against a real Redis."""

from __future__ import annotations

import redis.asyncio as aioredis


def isolated_url(server: str, tag: str, **options: object) -> str:
    """A URL whose queue (and so every key) belongs to one test (``tag``)."""
    opts = {"queue": f"fmtest_{tag}", **options}
    sep = "&" if "?" in server else "?"
    return server + sep + "&".join(f"{k}={v}" for k, v in opts.items())


async def delete_queue(server: str, tag: str) -> None:
    """Delete every key of :func:`isolated_url`'s queue on a single Redis server."""
    client = aioredis.Redis.from_url(server)
    try:
        keys = [k async for k in client.scan_iter(match=f"fm:{{fmtest_{tag}}}:*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()

"""The Redis client: opening it, and what a connection checks and tidies up."""

from __future__ import annotations

import logging
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from framework_m_core.errors import BrokerError

from .schema import text
from .settings import RedisSettings

log = logging.getLogger("framework_m.redis")


async def open_client(s: RedisSettings) -> Any:
    """A connected client (a cluster client with ``cluster=1``); BrokerError if unreachable."""
    try:
        if s.cluster:
            client: Any = RedisCluster.from_url(s.client_url, max_connections=s.max_connections)
            await client.initialize()
        else:
            # Callers beyond max_connections wait for a connection instead of failing.
            pool = aioredis.BlockingConnectionPool.from_url(
                s.client_url, max_connections=s.max_connections, timeout=None
            )
            client = aioredis.Redis(connection_pool=pool)
            await client.ping()
    except (RedisError, OSError) as exc:
        raise BrokerError(f"cannot connect to {s.display_url}: {exc}") from None
    return client


async def warn_on_eviction(client: Any) -> None:
    """An evicted dedup key lets a slot run twice: say so when Redis may evict."""
    try:
        reply = await client.config_get("maxmemory-policy")
    except RedisError as exc:
        log.warning(
            "cannot read maxmemory-policy (%s): make sure it is 'noeviction'; "
            "an evicted dedup key lets a slot run twice",
            exc,
        )
        return
    bad = {p for p in (reply.values() if isinstance(reply, dict) else ()) if p != "noeviction"}
    if bad:
        log.warning(
            "maxmemory-policy is %s: Redis may evict dedup keys and jobs under memory "
            "pressure, and an evicted dedup key lets a slot run twice; set noeviction",
            ", ".join(sorted(bad)),
        )


async def forget_consumer(client: Any, s: RedisSettings, consumer: str) -> None:
    """Remove ``consumer`` from the group when it holds nothing, so names do not pile up.

    A consumer that still holds entries stays: deleting it would drop them from the
    pending list, and no one could reclaim them.
    """
    try:
        consumers = await client.xinfo_consumers(s.stream, s.group)
        mine = [c for c in consumers if text(c["name"]) == consumer]
        if mine and int(mine[0]["pending"]) == 0:
            await client.xgroup_delconsumer(s.stream, s.group, consumer)
    except (RedisError, OSError) as exc:
        log.debug("could not remove consumer %s: %s", consumer, exc)

"""The Redis client: opening it, and what a connection checks and tidies up."""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import SSLConnection
from redis.asyncio.connection import parse_url as parse_redis_url
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.exceptions import NoPermissionError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from framework_m_core.ports import BrokerError, ConfigurationError, heard_at, not_the_server
from framework_m_core.ports.greeting import REDIS

from . import scripts
from .schema import text
from .settings import DEFAULT_PORT, RedisSettings

log = logging.getLogger("framework_m.redis")


async def open_client(s: RedisSettings) -> Any:
    """A connected client (a cluster client with ``cluster=1``, the primary's through the
    sentinels with ``redis+sentinel://``); BrokerError if unreachable."""
    client: Any = None
    try:
        if s.cluster:
            seeds = [ClusterNode(host, port) for host, port in s.seeds] or None
            client = RedisCluster.from_url(
                s.client_url, startup_nodes=seeds, max_connections=s.max_connections
            )
            await client.initialize()
        elif s.sentinels:
            client = _sentinel_client(s)
            await client.ping()
        else:
            pool = WaitingPool.from_url(s.client_url, max_connections=s.max_connections)
            client = aioredis.Redis(connection_pool=pool)
            await client.ping()
    except (RedisError, OSError) as exc:
        if client is not None:
            await close_client(client)
        timed_out = isinstance(exc, TimeoutError | RedisTimeoutError)  # no answer to name
        if not timed_out and (problem := await not_redis(s)) is not None:
            raise ConfigurationError(problem) from None
        raise BrokerError(f"cannot connect to {s.display_url}: {exc}") from None
    return client


GREETING_WAIT = 1.5  # seconds a port that failed a connect has to say what it is


async def not_redis(s: RedisSettings) -> str | None:
    """After a failed connect: the line naming what answered instead of Redis on the URL's
    port (NATS greets with INFO, RabbitMQ answers PING with its protocol header, and
    redis-py would report a protocol error or a reset, and a worker try again forever);
    None when nothing else answered."""
    if s.sentinels or s.seeds:
        addresses = list(s.sentinels or s.seeds)
    else:
        parts = urlsplit(s.client_url)
        if parts.scheme not in ("redis", "rediss") or not parts.hostname:
            return None
        addresses = [(parts.hostname, parts.port or DEFAULT_PORT)]
    for host, port in addresses:
        problem = not_the_server(host, port, await heard_at(host, port, GREETING_WAIT), REDIS)
        if problem is not None:
            return problem
    return None


def _sentinel_client(s: RedisSettings) -> Any:
    """The primary's client: each new connection asks the sentinels where it is now, and
    one to a primary that was demoted is dropped on its first READONLY answer."""
    kwargs = parse_redis_url(s.client_url)
    kwargs.pop("host", None)
    kwargs.pop("port", None)
    tls = kwargs.pop("connection_class", None) is SSLConnection
    own: dict[str, Any] = {k: v for k, v in kwargs.items() if k.startswith(("socket_", "ssl_"))}
    if tls:
        own["ssl"] = True
    if s.sentinel_username is not None:
        own["username"] = s.sentinel_username
    if s.sentinel_password is not None:
        own["password"] = s.sentinel_password
    sentinel = Sentinel(s.sentinels, sentinel_kwargs=own)
    return sentinel.master_for(
        s.master,
        redis_class=aioredis.Redis,
        connection_pool_class=WaitingSentinelPool,
        max_connections=s.max_connections,
        ssl=tls,
        **kwargs,
    )


async def close_client(client: Any) -> None:
    """Close ``client`` and, for a Sentinel one, its connections to the sentinels."""
    try:
        await client.aclose()
    finally:
        pool = getattr(client, "connection_pool", None)  # a cluster client has none
        sentinel = getattr(pool, "sentinel_manager", None)
        if sentinel is not None:
            await sentinel.aclose()


class _Waiting:
    """A pool whose callers beyond ``max_connections`` wait for a connection instead of
    failing, as redis-py's BlockingConnectionPool does, for a semaphore's cost: that pool
    takes a condition and a timeout around every command, the largest cost an enqueue
    had beyond the raw client's."""

    max_connections: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slots = asyncio.Semaphore(self.max_connections)
        self._lent: set[Any] = set()  # connections handed out under a slot

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        await self._slots.acquire()
        try:
            connection = await super().get_connection(*args, **kwargs)  # type: ignore[misc]
        except BaseException:
            self._slots.release()
            raise
        self._lent.add(connection)
        return connection

    async def release(self, connection: Any) -> None:
        try:
            await super().release(connection)  # type: ignore[misc]
        finally:
            if connection in self._lent:  # redis-py also releases what failed to connect
                self._lent.discard(connection)
                self._slots.release()


class WaitingPool(_Waiting, aioredis.ConnectionPool):
    """redis-py's pool, waiting for a connection when all are lent instead of failing."""


class WaitingSentinelPool(_Waiting, SentinelConnectionPool):
    """redis-py's Sentinel pool, waiting for a connection when all are lent."""


# Every command the adapter runs, itself or in its scripts, with keys of the queue.
_COMMANDS = (
    "XADD {stream} * b x", "XACK {stream} g 0-1", "XCLAIM {stream} g c 0 0-1",
    "XDEL {stream} 0-1", "XLEN {stream}", "XPENDING {stream} g - + 1",
    "XREADGROUP GROUP g c COUNT 1 STREAMS {stream} >", "XAUTOCLAIM {stream} g c 0 0-0",
    "XGROUP CREATE {stream} g 0 MKSTREAM", "XGROUP DELCONSUMER {stream} g c",
    "XINFO GROUPS {stream}", "XINFO CONSUMERS {stream} g", "XADD {dead} * b x",
    "XREVRANGE {dead} + -", "ZADD {delayed} 1 m", "ZRANGEBYSCORE {delayed} 0 1",
    "ZRANGE {delayed} 0 0", "ZREM {delayed} m", "ZADD {later} 1 m",
    "ZREMRANGEBYSCORE {later} 0 1", "SET {dedup} 1 NX PX 1", "DEL {dedup}",
    "HGET {meta} layout", "HSETNX {meta} layout 1", "TIME", "PEXPIRE {dedup} 1", "WAIT 0 0",
    "HMGET {record} v d", "HSET {record} v 1 d x", "PERSIST {record}", "DEL {record}",
    "EXISTS {record}", "PEXPIRE {record} 1",
    "INCR {versions}", "PUBLISH {changes} k", "SUBSCRIBE {changes}",
)  # fmt: skip
_CATEGORIES = {
    "X": "@stream", "Z": "@sortedset", "H": "@hash", "S": "@string", "D": "@keyspace",
    "P": "@keyspace", "W": "+wait", "I": "@string", "PUBLISH": "@pubsub", "SUBSCRIBE": "@pubsub",
}  # fmt: skip


async def check_permissions(client: Any, s: RedisSettings) -> None:
    """Fail at start, naming what to grant, when the ACL user may not run scripts or a
    command the adapter needs; a worker would otherwise retry forever."""
    keys = {"stream": s.stream, "dead": s.dead, "delayed": s.delayed, "meta": s.meta}
    keys["later"] = s.later
    keys["record"], keys["versions"], keys["changes"] = s.record_key("check"), s.versions, s.changes
    commands = [c.format(dedup=s.dedup_key("check"), **keys) for c in _COMMANDS]
    try:
        denied = await client.eval(scripts.DENIED, 1, s.stream, *commands)
    except NoPermissionError as exc:
        raise ConfigurationError(
            f"the Redis user of {s.display_url} may not run Lua scripts ({exc}); "
            "framework-m needs the ACL category +@scripting"
        ) from None
    except ResponseError as exc:
        log.debug("cannot check the ACL user's commands (Redis < 7.0?): %s", exc)
        return
    except RedisError as exc:
        raise BrokerError(f"cannot check the Redis user's permissions: {exc}") from None
    if denied:
        names = sorted({text(c).split()[0] for c in denied})
        categories = sorted(
            {_CATEGORIES.get(n, _CATEGORIES.get(n[0], "@fast")) for n in names if n != "TIME"}
        )
        categories += ["+time"] if "TIME" in names else []
        raise ConfigurationError(
            f"the Redis user of {s.display_url} may not run {', '.join(names)} on the keys "
            f"{s.key('*')}; grant {' '.join(categories)} on them (ACL SETUSER)"
        )


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

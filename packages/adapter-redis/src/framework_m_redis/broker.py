"""``redis://``: framework-m on Redis Streams.

Enqueue is one Lua script: ``SET <dedup key> <job id> NX PX <window> GET`` and
the ``XADD`` run as one atomic step, so no crash or failover leaves a dedup key
without its job or a job without its key. Workers read through one consumer
group; an ack is ``XACK`` + ``XDEL`` in one step; a crashed consumer's entries
are reclaimed with ``XAUTOCLAIM`` after the visibility timeout, which running
jobs extend; retries wait in a sorted set that any replica moves back when due.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Sequence
from typing import Any, Self

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError, ResponseError

from framework_m_core.broker import BaseBroker, Capability, DeadLetter, Delivery, PublishResult
from framework_m_core.errors import BrokerError
from framework_m_core.messages import JobMessage
from framework_m_core.schema import SchemaChange, SchemaPlan

from . import scripts
from .settings import RedisSettings, parse_url

log = logging.getLogger("framework_m.redis")

LAYOUT = 1  # the key layout this code writes; bump with a migration when it changes
_PROMOTE_BATCH = 500
# Longest a blocked read waits before looking for due retries and silent consumers' jobs.
_RECLAIM_SCAN = 1.0


class RedisBroker(BaseBroker):
    """Redis Streams adapter; see the module docstring and the README's Redis section."""

    capabilities = frozenset(
        {
            Capability.DEAD_LETTER_INSPECTION,
            Capability.RAW_PUBLISH,
            Capability.CROSS_PROCESS,
            Capability.NEW_ID_AFTER_WINDOW,
        }
    )

    def __init__(self, settings: RedisSettings) -> None:
        super().__init__(settings.display_url)
        self.settings = settings
        self.consumer = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
        self._client: Any = None
        self._scripts: dict[str, Any] = {}

    @classmethod
    def from_url(cls, url: str) -> Self:
        return cls(parse_url(url))

    @property
    def dedup_window(self) -> float:
        return self.settings.dedup_window

    @property
    def visibility_timeout(self) -> float:
        return self.settings.visibility_timeout

    @property
    def client(self) -> Any:
        if self._client is None:
            raise BrokerError(f"{self.display_url} is not connected")
        return self._client

    # -- lifecycle ---------------------------------------------------------------------

    async def connect(self) -> None:
        if self._client is not None:
            return
        s = self.settings
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
            raise BrokerError(f"cannot connect to {self.display_url}: {exc}") from None
        self._client = client
        self._scripts = {
            name: client.register_script(getattr(scripts, name))
            for name in ("ENQUEUE", "ACK", "RETRY", "RELEASE", "DEAD_LETTER", "PROMOTE")
        }
        await self._warn_on_eviction()

    async def close(self) -> None:
        client = self._client
        if client is None:
            return
        await self._forget_consumer()
        self._client = None
        await client.aclose()

    async def _forget_consumer(self) -> None:
        """Remove this consumer from the group when it holds nothing, so names do not pile up.

        A consumer that still holds entries stays: deleting it would drop them from the
        pending list, and no one could reclaim them.
        """
        s = self.settings
        try:
            consumers = await self.client.xinfo_consumers(s.stream, s.group)
            mine = [c for c in consumers if _text(c["name"]) == self.consumer]
            if mine and int(mine[0]["pending"]) == 0:
                await self.client.xgroup_delconsumer(s.stream, s.group, self.consumer)
        except (RedisError, OSError) as exc:
            log.debug("could not remove consumer %s: %s", self.consumer, exc)

    async def _warn_on_eviction(self) -> None:
        try:
            reply = await self.client.config_get("maxmemory-policy")
        except RedisError as exc:
            log.warning(
                "cannot read maxmemory-policy (%s): make sure it is 'noeviction'; "
                "an evicted dedup key lets a slot run twice",
                exc,
            )
            return
        policies = set(reply.values()) if isinstance(reply, dict) else set()
        bad = {p for p in policies if p != "noeviction"}
        if bad:
            log.warning(
                "maxmemory-policy is %s: Redis may evict dedup keys and jobs under memory "
                "pressure, and an evicted dedup key lets a slot run twice; set noeviction",
                ", ".join(sorted(bad)),
            )

    async def _run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        try:
            return await self._scripts[name](keys=keys, args=args)
        except ResponseError as exc:
            if "FRAMEWORK_M_FULL" in str(exc):
                raise BrokerError(
                    f"queue {self.settings.queue!r} holds max_len={self.settings.max_len} "
                    "jobs: refusing to enqueue more (workers are behind)"
                ) from None
            raise BrokerError(f"redis refused {name.lower()}: {exc}") from None
        except (RedisError, OSError) as exc:
            raise BrokerError(f"redis {name.lower()} failed: {exc}") from None

    # -- schema ------------------------------------------------------------------------

    async def plan_schema(self) -> SchemaPlan:
        s = self.settings
        target = f"queue {s.queue}"
        try:
            layout = await self.client.hget(s.meta, "layout")
            groups = await self._groups()
        except RedisError as exc:
            raise BrokerError(f"cannot inspect {target}: {exc}") from None
        if layout is not None and int(layout) > LAYOUT:
            detail = (
                f"key layout {int(layout)} was written by a newer framework-m-redis "
                f"(this one writes {LAYOUT}); upgrade this worker"
            )
            return SchemaPlan((SchemaChange("refuse", target, detail),))
        changes = []
        if s.group not in groups:
            changes.append(
                SchemaChange(
                    "create",
                    f"consumer group {s.group} on {s.stream}",
                    "reads from the start of the stream",
                )
            )
        if layout is None:
            changes.append(SchemaChange("create", f"layout marker {s.meta}", f"layout {LAYOUT}"))
        return SchemaPlan(tuple(changes))

    async def _groups(self) -> set[str]:
        try:
            infos = await self.client.xinfo_groups(self.settings.stream)
        except ResponseError:  # no such key
            return set()
        return {_text(i["name"]) for i in infos}

    async def sync_schema(self, *, dry_run: bool = False) -> SchemaPlan:
        plan = await self.plan_schema()
        if dry_run or plan.in_sync:
            return plan
        if plan.refused:
            from framework_m_core.errors import SchemaConflictError

            raise SchemaConflictError("; ".join(str(c) for c in plan.refused))
        s = self.settings
        try:
            await self.client.xgroup_create(s.stream, s.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise BrokerError(f"cannot create consumer group {s.group}: {exc}") from None
        await self.client.hsetnx(s.meta, "layout", LAYOUT)
        return plan

    # -- publishing --------------------------------------------------------------------

    async def _publish(self, message: JobMessage, body: bytes) -> PublishResult:
        s = self.settings
        dedup = message.deduplication_id
        stored, job_id = await self._run(
            "ENQUEUE",
            [s.stream, s.dedup_key(dedup) if dedup is not None else s.stream],
            [message.id, body, int(s.dedup_window * 1000), s.max_len, "1" if dedup else "0"],
        )
        return PublishResult(_text(job_id), duplicate=not stored)

    async def publish_raw(self, body: bytes) -> None:
        try:
            await self.client.xadd(self.settings.stream, {"b": body, "a": "0"})
        except RedisError as exc:
            raise BrokerError(f"redis xadd failed: {exc}") from None

    # -- consuming ---------------------------------------------------------------------

    async def receive(self, max_messages: int, timeout: float) -> Sequence[Delivery]:
        s = self.settings
        deadline = time.monotonic() + timeout
        try:
            while True:
                await self._run("PROMOTE", [s.delayed, s.stream], [_now_ms(), _PROMOTE_BATCH])
                out = await self._reclaim(max_messages)
                left = deadline - time.monotonic()
                if len(out) < max_messages:
                    block = 1 if out else await self._block_ms(left)
                    reply = await self.client.xreadgroup(
                        s.group,
                        self.consumer,
                        {s.stream: ">"},
                        count=max_messages - len(out),
                        block=block,
                    )
                    for _, entries in reply or []:
                        out.extend(_delivery(eid, fields, 1) for eid, fields in entries if fields)
                if out or time.monotonic() >= deadline:
                    return out
        except ResponseError as exc:
            if "NOGROUP" in str(exc):
                raise BrokerError(
                    f"consumer group {s.group} does not exist: run schema sync (m migrate)"
                ) from None
            raise BrokerError(f"redis receive failed: {exc}") from None
        except (RedisError, OSError) as exc:
            raise BrokerError(f"redis receive failed: {exc}") from None

    async def _block_ms(self, left: float) -> int:
        """How long to block: until the deadline, the next due retry, or the next reclaim scan."""
        block = int(min(left, _RECLAIM_SCAN, self.settings.visibility_timeout / 2) * 1000)
        head = await self.client.zrange(self.settings.delayed, 0, 0, withscores=True)
        if head:
            block = min(block, int(head[0][1]) - _now_ms())
        return max(1, block)

    async def _reclaim(self, limit: int) -> list[Delivery]:
        """Entries whose consumer went silent for longer than the visibility timeout."""
        s = self.settings
        idle = int(s.visibility_timeout * 1000)
        reply = await self.client.xautoclaim(
            s.stream, s.group, self.consumer, min_idle_time=idle, start_id="0-0", count=limit
        )
        entries = [(eid, fields) for eid, fields in reply[1] if fields]
        out = []
        for eid, fields in entries:
            pending = await self.client.xpending_range(s.stream, s.group, min=eid, max=eid, count=1)
            times = pending[0]["times_delivered"] if pending else 1
            out.append(_delivery(eid, fields, times))
        if out:
            log.info("reclaimed %d job(s) from silent consumers", len(out))
        return out

    async def ack(self, delivery: Delivery) -> None:
        s = self.settings
        await self._run("ACK", [s.stream], [s.group, _eid(delivery)])

    async def retry(self, delivery: Delivery, delay: float) -> None:
        s = self.settings
        due = _now_ms() + int(max(0.0, delay) * 1000)
        await self._run(
            "RETRY",
            [s.stream, s.delayed],
            [s.group, _eid(delivery), due, delivery.attempt, delivery.body],
        )

    async def release(self, delivery: Delivery) -> None:
        s = self.settings
        await self._run(
            "RELEASE",
            [s.stream],
            [s.group, _eid(delivery), delivery.attempt - 1, delivery.body],
        )

    async def extend(self, delivery: Delivery) -> None:
        s = self.settings
        try:
            await self.client.xclaim(
                s.stream, s.group, self.consumer, 0, [_eid(delivery)], justid=True
            )
        except RedisError as exc:
            raise BrokerError(f"redis xclaim failed: {exc}") from None

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        s = self.settings
        await self._run(
            "DEAD_LETTER",
            [s.stream, s.dead],
            [
                s.group,
                _eid(delivery),
                delivery.body,
                reason,
                delivery.attempt,
                f"{time.time():.3f}",
                s.dead_letter_max_len,
            ],
        )

    async def dead_letters(self, limit: int = 100) -> Sequence[DeadLetter]:
        try:
            entries = await self.client.xrevrange(self.settings.dead, count=limit)
        except RedisError as exc:
            raise BrokerError(f"redis xrevrange failed: {exc}") from None
        out = [
            DeadLetter(
                body=fields.get(b"b", b""),
                reason=_text(fields.get(b"r", b"")),
                attempts=int(fields.get(b"n", 0)),
                dead_lettered_at=float(fields.get(b"t", 0)),
            )
            for _, fields in entries
        ]
        out.reverse()
        return out


def _delivery(eid: Any, fields: dict[bytes, bytes], times_delivered: int) -> Delivery:
    before = int(fields.get(b"a", b"0") or 0)
    return Delivery(fields.get(b"b", b""), before + times_delivered, _text(eid))


def _eid(delivery: Delivery) -> str:
    if not isinstance(delivery.handle, str):
        raise BrokerError("delivery was not received from this Redis broker")
    return delivery.handle


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _now_ms() -> int:
    return int(time.time() * 1000)

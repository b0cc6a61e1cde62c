"""Redis schema sync: the consumer group and the key-layout marker of a queue."""

from __future__ import annotations

from typing import Any

from redis.exceptions import RedisError, ResponseError

from framework_m_core.ports import BrokerError, SchemaChange, SchemaPlan

from .settings import RedisSettings

LAYOUT = 1  # the key layout this code writes; bump with a migration when it changes


async def plan(client: Any, s: RedisSettings) -> SchemaPlan:
    """What is missing; a layout written by a newer framework-m-redis is refused."""
    target = f"queue {s.queue}"
    try:
        layout = await client.hget(s.meta, "layout")
        groups = await _groups(client, s)
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
        group = f"consumer group {s.group} on {s.stream}"
        changes.append(SchemaChange("create", group, "reads from the start of the stream"))
    if layout is None:
        changes.append(SchemaChange("create", f"layout marker {s.meta}", f"layout {LAYOUT}"))
    return SchemaPlan(tuple(changes))


async def apply(client: Any, s: RedisSettings) -> None:
    """Create the group (an existing one is fine: another replica made it) and the marker."""
    try:
        await client.xgroup_create(s.stream, s.group, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise BrokerError(f"cannot create consumer group {s.group}: {exc}") from None
    except RedisError as exc:
        raise BrokerError(f"cannot create consumer group {s.group}: {exc}") from None
    try:
        await client.hsetnx(s.meta, "layout", LAYOUT)
    except RedisError as exc:
        raise BrokerError(f"cannot write the layout marker {s.meta}: {exc}") from None


async def _groups(client: Any, s: RedisSettings) -> set[str]:
    try:
        infos = await client.xinfo_groups(s.stream)
    except ResponseError:  # no such key
        return set()
    return {text(i["name"]) for i in infos}


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

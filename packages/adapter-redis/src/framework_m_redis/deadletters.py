"""The dead-letter stream's entries, read back and removed; and the fields they carry."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from redis.exceptions import RedisError

from framework_m_core.ports import BrokerError, DeadLetter

from .schema import text


async def latest(client: Any, stream: str, limit: int) -> list[DeadLetter]:
    """The ``limit`` latest entries of ``stream``, oldest first."""
    if limit < 1:
        return []
    try:
        entries = await client.xrevrange(stream, count=limit)
    except RedisError as exc:
        raise BrokerError(f"redis xrevrange failed: {exc}") from None
    out = [
        DeadLetter(
            body=fields.get(b"b", b""),
            reason=text(fields.get(b"r", b"")),
            attempts=count(fields.get(b"n")) or 0,
            dead_lettered_at=_time(fields.get(b"t")),
            ref=text(eid),
        )
        for eid, fields in entries
    ]
    out.reverse()
    return out


async def remove(client: Any, stream: str, letters: Sequence[DeadLetter]) -> int:
    """XDEL the letters' entries; how many were still there."""
    ids = [letter.ref for letter in letters if isinstance(letter.ref, str)]
    if not ids:
        return 0
    try:
        return int(await client.xdel(stream, *ids))
    except RedisError as exc:
        raise BrokerError(f"redis xdel of dead letters failed: {exc}") from None


def count(raw: bytes | None) -> int | None:
    """An attempts field: 0 when absent, None when it is not a count this adapter wrote."""
    if raw is None or raw == b"":
        return 0
    if len(raw) > 9 or not raw.isdigit():  # no sign, no exponent, below a billion
        return None
    return int(raw)


def _time(raw: bytes | None) -> float:
    try:
        value = float(raw or 0)
    except ValueError:
        return 0.0
    return value if math.isfinite(value) else 0.0

"""What the fleet announced: the jobs and the schedules of the apps its replicas run.

One state record, ``fleet:announced``, a JSON object version 1::

    {"v": 1, "jobs": {"report": 1700000000.0, ...}, "schedules": {"report": ...}}

each name with when a replica last announced it (unix seconds). Every worker merges
its app's names in as it starts, by compare-and-set, writing only when a name is new
or its time is a day old; names no replica announced for :data:`FORGET` seconds drop
out with the next write. Steering without the app (``m schedules pause`` without
``--app``) checks its names against it: a typo is refused, and a broker no replica
ever ran on (no record) is named as such. The record is validated as it is read; one
that is not what this module writes counts as none.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import BrokerError
from ..ports.protocols import BrokerProtocol
from . import keys
from .runtime_schedules import contention_pause
from .shared import shared

log = logging.getLogger("framework_m.worker")

VERSION = 1
FORGET = 30 * 86_400.0  # seconds after which a name no replica announced drops out
_RENEW = 86_400.0  # a name announced less than this long ago is not written again
MOST = 5_000  # names of each kind kept at most (the most recently announced)
_ROUNDS = 20


@dataclass(frozen=True, slots=True)
class Announced:
    """The names the fleet announced, each with when it last did."""

    jobs: Mapping[str, float]
    schedules: Mapping[str, float]


def decode(value: bytes) -> Announced | None:
    """The record in ``value``; None (with a warning) when it is not one."""
    try:
        data = json.loads(value)
        if not isinstance(data, dict) or data.get("v") != VERSION:
            raise ValueError("not a version-1 object")
        jobs, schedules = _names(data.get("jobs")), _names(data.get("schedules"))
    except (ValueError, RecursionError) as exc:
        log.warning("the fleet's announced names are malformed (%s); ignored", exc)
        return None
    return Announced(jobs, schedules)


def _names(found: object) -> dict[str, float]:
    if not isinstance(found, dict) or not all(
        isinstance(k, str) and _is_time(v) for k, v in found.items()
    ):
        raise ValueError("'jobs' and 'schedules' are not names with times")
    return {k: float(v) for k, v in found.items()}


def _is_time(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _encode(announced: Announced) -> bytes:
    record = {"v": VERSION, "jobs": announced.jobs, "schedules": announced.schedules}
    return json.dumps(record, separators=(",", ":"), sort_keys=True).encode()


def _stale(current: Mapping[str, float], ours: Iterable[str], now: float) -> list[str]:
    """Which of ``ours`` need announcing: new, or announced a day ago or more."""
    return [n for n in ours if current.get(n, -math.inf) < now - _RENEW]


def _merged(current: Mapping[str, float], stale: Iterable[str], now: float) -> dict[str, float]:
    """``current`` with ``stale`` announced ``now`` and the forgotten dropped, at most
    :data:`MOST` of them (the most recently announced)."""
    out = {n: t for n, t in current.items() if t >= now - FORGET}
    out.update(dict.fromkeys(stale, now))
    return dict(sorted(out.items(), key=lambda item: item[1], reverse=True)[:MOST])


async def announce(broker: BrokerProtocol, jobs: Iterable[str], schedules: Iterable[str]) -> bool:
    """Merge this app's ``jobs`` and ``schedules`` into the record; False when other
    writers won every round (the next start tries again)."""
    jobs, schedules = list(jobs), list(schedules)
    for attempt in range(_ROUNDS):
        await contention_pause(attempt)
        now = time.time()
        entry = await shared(broker).read_state(keys.ANNOUNCED)
        current = None if entry is None else decode(entry.value)
        held = current or Announced({}, {})
        stale_jobs, stale_schedules = (
            _stale(held.jobs, jobs, now),
            _stale(held.schedules, schedules, now),
        )
        if current is not None and not stale_jobs and not stale_schedules:
            return True
        value = _encode(
            Announced(
                _merged(held.jobs, stale_jobs, now), _merged(held.schedules, stale_schedules, now)
            )
        )
        version = None if entry is None else entry.version
        if await shared(broker).write_state(keys.ANNOUNCED, value, version=version) is not None:
            return True
    return False


async def announced(broker: BrokerProtocol) -> Announced | None:
    """What the fleet announced; None when no replica ever did (or the record is not
    one: it is rewritten by the next worker to start)."""
    entry = await shared(broker).read_state(keys.ANNOUNCED)
    if entry is None:
        return None
    return decode(entry.value)


async def announce_quietly(
    broker: BrokerProtocol, jobs: Iterable[str], schedules: Iterable[str]
) -> None:
    """:func:`announce`, logging what stops it: a worker runs on without it."""
    try:
        if not await announce(broker, jobs, schedules):
            log.warning("fleet: this app's names not announced (writers kept racing)")
    except BrokerError as exc:
        log.warning("fleet: this app's names not announced (%s)", exc)

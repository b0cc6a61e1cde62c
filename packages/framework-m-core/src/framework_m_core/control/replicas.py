"""The fleet's roll: every worker keeps an entry in the broker, renewed by a heartbeat.

Entries live in the broker's shared state, spread over
:data:`~framework_m_core.control.keys.REPLICA_BUCKETS` records ``replicas:{n}`` (a
replica's bucket is a hash of its id), each a JSON object of entries by replica id. A
worker writes its entry every :data:`HEARTBEAT` seconds by
compare-and-set, dropping entries of its bucket not renewed for :data:`FORGET`
seconds, and removes its own when it stops. Whoever lists the roll (``m console``)
reads the records and keeps the entries renewed within :data:`QUIET` seconds: a
replica killed without a word drops out by itself. Nobody talks to a replica.

Records read from the broker are validated entry by entry; an entry that is not
what this module writes is left out with a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..about import __version__
from ..errors import BrokerError
from ..ports.protocols import BrokerProtocol
from . import keys
from .checks import is_count, is_unix_time
from .runtime_schedules import contention_pause
from .shared import shared

log = logging.getLogger("framework_m.worker")

HEARTBEAT = 10.0  # seconds between a worker's renewals
QUIET = 3 * HEARTBEAT  # an entry not renewed for this long is a replica gone quiet
FORGET = 6 * HEARTBEAT  # entries older than this are dropped by the next writer
_ROUNDS = 20  # compare-and-set rounds before a renewal gives up until the next beat
_FIELDS = {
    "host": str,
    "pid": int,
    "version": str,
    "ticking": bool,
    "running": int,
    "concurrency": int,
    "started_at": float,
    "seen_at": float,
}


@dataclass(frozen=True, slots=True)
class Replica:
    """One worker as it last said: where it runs, what it does, when it last beat."""

    id: str
    host: str
    pid: int
    version: str
    ticking: bool  # runs the ticker (``m worker``), not ``--no-scheduler``
    running: int  # handlers running at its last beat
    concurrency: int
    started_at: float  # unix seconds
    seen_at: float  # its last beat, by its own clock
    #: Deliveries it settled since it started, by outcome (``succeeded``, ``retried``,
    #: ``dead_lettered``, ``skipped``, ``expired``, ``cancelled``); empty from a replica
    #: of a version that did not say.
    counts: Mapping[str, int] = field(default_factory=dict)
    #: What its outbox relay last saw (``rows`` waiting, ``oldest`` age in seconds,
    #: ``failing`` rows whose publish failed, ``seen_at``); empty without a relay.
    outbox: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OutboxSeen:
    """The outbox table as the relay that counted it last saw it."""

    rows: int  # rows waiting
    oldest: float  # the age of the oldest, seconds (0: none waits)
    failing: int  # rows whose publish failed at least once
    seen_at: float  # when it counted, by its clock
    replica: str  # the id of the replica whose relay counted


def outbox_seen(found: Sequence[Replica]) -> OutboxSeen | None:
    """The latest count of the outbox among ``found`` replicas' entries; None when no
    replica relays an outbox."""
    counted = [r for r in found if "seen_at" in r.outbox]
    if not counted:
        return None
    r = max(counted, key=lambda r: r.outbox["seen_at"])
    o = r.outbox
    return OutboxSeen(
        int(o.get("rows", 0)), o.get("oldest", 0.0), int(o.get("failing", 0)), o["seen_at"], r.id
    )


def new_replica_id() -> str:
    """``host:pid:random``: unique even for a pid reused on another host or later."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _decode(raw: bytes | None, key: str) -> dict[str, dict[str, Any]]:
    """The entries of a bucket record; invalid ones are left out with a warning."""
    if raw is None:
        return {}
    try:
        found = json.loads(raw)["replicas"]
        if not isinstance(found, dict):
            raise TypeError("replicas is not an object")
    except (ValueError, TypeError, KeyError) as exc:
        log.warning("state record %s is not a replica roll (%s): read as empty", key, exc)
        return {}
    entries = {}
    for replica_id, entry in found.items():
        if _valid(entry):
            entries[str(replica_id)] = entry
        else:
            log.warning("state record %s: entry %r is not a replica: left out", key, replica_id)
    return entries


def _counts(found: object) -> dict[str, int]:
    """An entry's counts as far as they are counts (none from an older replica)."""
    if not isinstance(found, dict):
        return {}
    return {str(k): v for k, v in found.items() if is_count(v) and isinstance(k, str)}


def _numbers(found: object) -> dict[str, float]:
    """An entry's outbox figures as far as they are finite numbers >= 0."""
    if not isinstance(found, dict):
        return {}
    return {str(k): float(v) for k, v in found.items() if isinstance(k, str) and is_unix_time(v)}


def _valid(entry: object) -> bool:
    if not isinstance(entry, dict):
        return False
    for name, kind in _FIELDS.items():
        value = entry.get(name)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            continue
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            return False
    return True


async def _change(
    broker: BrokerProtocol, key: str, edit: Callable[[dict[str, dict[str, Any]]], None]
) -> bool:
    """Apply ``edit`` to the entries of bucket ``key`` by compare-and-set; False when
    other writers won every round."""
    for attempt in range(_ROUNDS):
        await contention_pause(attempt)
        current = await shared(broker).read_state(key)
        entries = _decode(None if current is None else current.value, key)
        edit(entries)
        value = json.dumps({"replicas": entries}, separators=(",", ":")).encode()
        version = None if current is None else current.version
        if await shared(broker).write_state(key, value, version=version) is not None:
            return True
    return False


async def list_replicas(broker: BrokerProtocol, now: float | None = None) -> list[Replica]:
    """The replicas renewed within :data:`QUIET` seconds of ``now``, by host and pid."""
    now = time.time() if now is None else now
    names = keys.replicas_buckets()
    records = await asyncio.gather(*(shared(broker).read_state(key) for key in names))
    out = []
    for key, record in zip(names, records, strict=True):
        for replica_id, entry in _decode(None if record is None else record.value, key).items():
            if entry["seen_at"] >= now - QUIET:
                fields = {name: entry[name] for name in _FIELDS}
                counts, outbox = _counts(entry.get("counts")), _numbers(entry.get("outbox"))
                out.append(Replica(id=replica_id, **fields, counts=counts, outbox=outbox))
    return sorted(out, key=lambda r: (r.host, r.pid, r.id))


class RollEntry:
    """A worker's entry in the roll: written at once, renewed every ``interval`` seconds
    until :meth:`close`, removed by :meth:`leave`.

    ``describe`` gives what changes between beats: ``(ticking, running, counts,
    outbox)``.
    """

    def __init__(
        self,
        broker: BrokerProtocol,
        describe: Callable[[], tuple[bool, int, Mapping[str, int], Mapping[str, float]]],
        *,
        concurrency: int,
        interval: float = HEARTBEAT,
    ) -> None:
        self.broker = broker
        self.describe = describe
        self.concurrency = concurrency
        self.interval = interval
        self.id = new_replica_id()
        self.key = keys.replicas_bucket(self.id)
        self.started_at = time.time()
        self.beats = 0
        self._closed = asyncio.Event()
        self._failing = False

    def entry(self, now: float) -> dict[str, Any]:
        ticking, running, counts, outbox = self.describe()
        host, pid, _ = self.id.rsplit(":", 2)
        replica = Replica(
            self.id, host, int(pid), __version__, ticking, running, self.concurrency,
            self.started_at, now, dict(counts), dict(outbox),
        )  # fmt: skip
        out = asdict(replica)
        del out["id"]
        if not outbox:
            del out["outbox"]
        return out

    async def beat(self) -> None:
        """Write this replica's entry now, dropping the bucket's forgotten ones."""
        now = time.time()
        mine = self.entry(now)

        def renew(entries: dict[str, dict[str, Any]]) -> None:
            for replica_id in [r for r, e in entries.items() if e["seen_at"] < now - FORGET]:
                del entries[replica_id]
            entries[self.id] = mine

        if await _change(self.broker, self.key, renew):
            self.beats += 1
        else:
            log.warning("replica roll: %s not renewed (writers kept racing)", self.key)

    async def run(self) -> None:
        """Beat until :meth:`close`; a broker error is logged once and tried again at the
        next beat."""
        while not self._closed.is_set():
            try:
                await self.beat()
                if self._failing:
                    log.info("replica roll: renewed again")
                self._failing = False
            except BrokerError as exc:
                if not self._failing:
                    log.warning("replica roll: cannot renew this replica's entry: %s", exc)
                self._failing = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), self.interval)

    def close(self) -> None:
        self._closed.set()

    async def leave(self) -> None:
        """Remove this replica's entry (a stopped worker is not listed as quiet)."""

        def remove(entries: dict[str, dict[str, Any]]) -> None:
            entries.pop(self.id, None)

        await _change(self.broker, self.key, remove)

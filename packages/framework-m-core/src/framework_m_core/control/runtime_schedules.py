"""Runtime schedules: created, changed and deleted while workers run, kept in the broker.

A runtime schedule has an id, names a job of the app, and has a schedule (a cron
expression in a zone, or an interval) and the kwargs of its runs. It is ticked under
the name ``@{id}``: its dedup ids are ``tick:@{id}:{slot}``, its state record
``schedule:@{id}``, its overlap lease ``overlap:@{id}``. Job names hold no ``@``, so
none of these can equal a code schedule's, and ids are unique, so none equals
another runtime schedule's. Every version of one schedule computes the same dedup
id for a slot: replicas that still tick the old version and those that tick the new
one enqueue that slot once between them.

Storage, on the shared-state port (records of at most 16 KiB): the schedules are
spread over :data:`BUCKETS` records ``runtime:{n}`` (``n`` from a hash of the id), each
a JSON object of id to definition. The record ``runtime:catalog`` holds a change
counter, the latest changes (counter, bucket) and which buckets hold schedules. A
change writes its bucket, then the catalog, each by compare-and-set. Replicas read
the catalog every :data:`POLL` seconds; when the counter moved they read the buckets
the changes name (every bucket in use when they are further behind), and every
:data:`RESYNC` seconds every bucket in use anyway, so that a change whose catalog
write was lost (its writer died between the two writes) is still picked up.

What is read from the broker is validated like any input: an entry that does not
parse is skipped with a warning naming it, never ticked.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import re
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import BrokerError, ConfigurationError, ScheduleError
from ..ports.messages import validate_job_name
from ..ports.protocols import BrokerProtocol
from ..scheduling.schedules import Cron, Every, Schedule, cron, every
from . import keys
from .checks import MAX_STATE_VALUE
from .shared import shared

log = logging.getLogger("framework_m.schedules")

BUCKETS = 1024
POLL = 2.0  # seconds between two reads of the catalog by a ticking replica
RESYNC = 300.0  # seconds between two reads of every bucket in use
MAX_KWARGS = 2048  # bytes of a runtime schedule's kwargs as JSON
_CHANGES_KEPT = 200  # recent changes the catalog lists
_ROUNDS = 200  # the catalog is one record every writer changes
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


@dataclass(frozen=True, slots=True)
class RuntimeSchedule:
    """A schedule set at runtime: ``job`` runs with ``kwargs`` at each slot."""

    id: str
    job: str
    schedule: Schedule
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """What it is ticked as: ``@{id}`` (dedup ids, state, leases, logs, metrics)."""
        return f"@{self.id}"

    def definition(self) -> dict[str, Any]:
        out: dict[str, Any] = {"job": self.job, "kwargs": dict(self.kwargs)}
        if isinstance(self.schedule, Every):
            out["every"] = self.schedule.seconds
        else:
            assert isinstance(self.schedule, Cron)
            out["cron"], out["tz"] = self.schedule.expression, self.schedule.tz
        return out


async def contention_pause(attempt: int) -> None:
    """Before compare-and-set round ``attempt`` (0: the first, no pause): a random pause
    that doubles each round up to 50 ms, so that writers racing on one record spread
    out instead of colliding again in step."""
    if attempt:
        await asyncio.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))


def validate_id(schedule_id: object) -> str:
    if not isinstance(schedule_id, str) or not _ID.fullmatch(schedule_id):
        raise ConfigurationError(
            f"invalid schedule id {schedule_id!r}: use letters, digits, '_', '.', '-' "
            "(starting with a letter or digit), at most 100 characters"
        )
    return schedule_id


def runtime_schedule(
    schedule_id: str,
    job: str,
    *,
    cron_expression: str | None = None,
    tz: str | None = None,
    every_seconds: float | None = None,
    kwargs: Mapping[str, Any] | None = None,
) -> RuntimeSchedule:
    """A validated runtime schedule: exactly one of ``cron_expression`` (with ``tz``,
    default UTC) and ``every_seconds``; kwargs a JSON object of at most
    :data:`MAX_KWARGS` bytes. Raises ConfigurationError or ScheduleError."""
    validate_id(schedule_id)
    try:
        validate_job_name(job)
    except Exception as exc:
        raise ConfigurationError(str(exc)) from None
    if (cron_expression is None) == (every_seconds is None):
        raise ConfigurationError("a runtime schedule needs exactly one of a cron or an interval")
    if cron_expression is not None:
        sched: Schedule = cron(cron_expression, tz or "UTC")
    else:
        if tz is not None:
            raise ScheduleError("a zone applies to cron schedules, not to intervals")
        assert every_seconds is not None
        sched = every(every_seconds)
    args = dict(kwargs or {})
    try:
        text = json.dumps(args, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"kwargs must be JSON: {exc}") from None
    if len(text.encode()) > MAX_KWARGS:
        raise ConfigurationError(f"kwargs must be at most {MAX_KWARGS} bytes as JSON")
    return RuntimeSchedule(schedule_id, job, sched, json.loads(text))


def decode(schedule_id: str, raw: object) -> RuntimeSchedule:
    """The schedule a bucket holds under ``schedule_id``; ConfigurationError or
    ScheduleError when it is not one this module writes."""
    if not isinstance(raw, dict) or not isinstance(raw.get("job"), str):
        raise ConfigurationError("not a schedule definition")
    kwargs = raw.get("kwargs", {})
    if not isinstance(kwargs, dict):
        raise ConfigurationError("kwargs is not an object")
    interval = raw.get("every")
    if interval is not None and (isinstance(interval, bool) or not isinstance(interval, int)):
        raise ConfigurationError("every is not whole seconds")
    expression, tz = raw.get("cron"), raw.get("tz")
    if expression is not None and not (isinstance(expression, str) and isinstance(tz, str)):
        raise ConfigurationError("cron or tz is not text")
    return runtime_schedule(
        schedule_id,
        raw["job"],
        cron_expression=expression,
        tz=tz if expression is not None else None,
        every_seconds=interval,
        kwargs=kwargs,
    )


def bucket_of(schedule_id: str) -> int:
    return zlib.crc32(schedule_id.encode()) % BUCKETS


@dataclass(frozen=True, slots=True)
class Catalog:
    """The change counter, the latest changes and the buckets in use."""

    counter: int = 0
    changes: tuple[tuple[int, int], ...] = ()  # (counter, bucket), oldest first
    used: frozenset[int] = frozenset()

    def encode(self) -> bytes:
        bits = bytearray(BUCKETS // 8)
        for n in self.used:
            bits[n // 8] |= 1 << (n % 8)
        return json.dumps(
            {
                "counter": self.counter,
                "changes": [list(c) for c in self.changes],
                "used": base64.b64encode(bytes(bits)).decode(),
            },
            separators=(",", ":"),
        ).encode()

    def changed_since(self, counter: int) -> set[int] | None:
        """The buckets changed after ``counter``; None when the list does not reach back."""
        if counter == self.counter:
            return set()
        if counter > self.counter or not self.changes or self.changes[0][0] > counter + 1:
            return None
        return {bucket for at, bucket in self.changes if at > counter}


def decode_catalog(value: bytes) -> Catalog:
    """The catalog in ``value``; BrokerError when it is not one this module writes
    (every replica then keeps what it had and says so)."""
    try:
        raw = json.loads(value)
        counter = raw["counter"]
        changes = tuple((int(a), int(b)) for a, b in raw["changes"])
        bits = base64.b64decode(raw["used"], validate=True)
    except (ValueError, KeyError, TypeError) as exc:
        raise BrokerError(f"the runtime schedule catalog is malformed: {exc}") from None
    if (
        isinstance(counter, bool)
        or not isinstance(counter, int)
        or counter < 0
        or len(bits) != BUCKETS // 8
        or any(not 0 <= b < BUCKETS for _, b in changes)
    ):
        raise BrokerError("the runtime schedule catalog is malformed")
    used = frozenset(n for n in range(BUCKETS) if bits[n // 8] >> (n % 8) & 1)
    return Catalog(counter, changes, used)


def decode_bucket(value: bytes, n: int) -> dict[str, RuntimeSchedule]:
    """The schedules of bucket ``n``; each entry that does not parse is left out, with
    a warning naming it."""
    try:
        raw = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        log.warning("runtime schedules: bucket %d is not JSON; its schedules are not ticked", n)
        return {}
    if not isinstance(raw, dict):
        log.warning("runtime schedules: bucket %d is not an object; not ticked", n)
        return {}
    out: dict[str, RuntimeSchedule] = {}
    for schedule_id, definition in raw.items():
        try:
            if bucket_of(validate_id(schedule_id)) != n:
                raise ConfigurationError(f"it belongs in bucket {bucket_of(schedule_id)}")
            out[schedule_id] = decode(schedule_id, definition)
        except (ConfigurationError, ScheduleError) as exc:
            log.warning("runtime schedule %r is malformed and not ticked: %s", schedule_id, exc)
    return out


def _encode_bucket(schedules: Mapping[str, RuntimeSchedule]) -> bytes:
    body = {k: s.definition() for k, s in sorted(schedules.items())}
    return json.dumps(body, separators=(",", ":")).encode()


async def _change_bucket(
    broker: BrokerProtocol,
    n: int,
    step: Callable[[dict[str, RuntimeSchedule]], dict[str, RuntimeSchedule] | None],
) -> dict[str, RuntimeSchedule] | None:
    """Apply ``step`` to bucket ``n`` by compare-and-set; the bucket as written (None:
    ``step`` had nothing to write)."""
    for attempt in range(_ROUNDS):
        await contention_pause(attempt)
        entry = await shared(broker).read_state(keys.runtime_bucket(n))
        current = {} if entry is None else decode_bucket(entry.value, n)
        new = step(dict(current))
        if new is None:
            return None
        value = _encode_bucket(new)
        if len(value) > MAX_STATE_VALUE:
            raise ConfigurationError(
                f"bucket {n} of the runtime schedules is full ({len(new)} schedules): "
                "use shorter kwargs"
            )
        version = None if entry is None else entry.version
        written = await shared(broker).write_state(keys.runtime_bucket(n), value, version=version)
        if written is not None:
            return new
    raise BrokerError(f"bucket {n} of the runtime schedules kept changing; try again")


async def _note_change(broker: BrokerProtocol, n: int) -> Catalog:
    """Count a change of bucket ``n`` in the catalog. Whether the bucket is in use is
    read after the catalog in each round, so that of two writers racing on one bucket
    the later catalog write sees the later bucket."""
    for attempt in range(_ROUNDS):
        await contention_pause(attempt)
        entry = await shared(broker).read_state(keys.RUNTIME_CATALOG)
        catalog = Catalog() if entry is None else decode_catalog(entry.value)
        bucket = await shared(broker).read_state(keys.runtime_bucket(n))
        in_use = bucket is not None and bool(decode_bucket(bucket.value, n))
        counter = catalog.counter + 1
        used = catalog.used | {n} if in_use else catalog.used - {n}
        changes = (*catalog.changes, (counter, n))[-_CHANGES_KEPT:]
        new = Catalog(counter, changes, frozenset(used))
        version = None if entry is None else entry.version
        if (
            await shared(broker).write_state(keys.RUNTIME_CATALOG, new.encode(), version=version)
            is not None
        ):
            return new
    raise BrokerError("the runtime schedule catalog kept changing; try again")


async def set_schedule(broker: BrokerProtocol, schedule: RuntimeSchedule) -> None:
    """Create or replace ``schedule``: every ticking replica ticks the new version from
    at most :data:`POLL` seconds (plus a read) on."""
    n = bucket_of(schedule.id)

    def put(bucket: dict[str, RuntimeSchedule]) -> dict[str, RuntimeSchedule]:
        bucket[schedule.id] = schedule
        return bucket

    await _change_bucket(broker, n, put)
    await _note_change(broker, n)
    log.info(
        "runtime schedule %s set: %s %s", schedule.id, schedule.job, schedule.schedule.describe()
    )


async def delete_schedule(broker: BrokerProtocol, schedule_id: str) -> bool:
    """Delete the schedule; False when there was none. Its state record (pause, latest
    slot) is left, so that setting the id again does not catch up what it already ran."""
    validate_id(schedule_id)
    n = bucket_of(schedule_id)
    found = False

    def drop(bucket: dict[str, RuntimeSchedule]) -> dict[str, RuntimeSchedule] | None:
        nonlocal found
        found = schedule_id in bucket
        if not found:
            return None
        del bucket[schedule_id]
        return bucket

    await _change_bucket(broker, n, drop)
    if found:
        await _note_change(broker, n)
        log.info("runtime schedule %s deleted", schedule_id)
    return found


async def read_catalog(broker: BrokerProtocol) -> Catalog:
    entry = await shared(broker).read_state(keys.RUNTIME_CATALOG)
    return Catalog() if entry is None else decode_catalog(entry.value)


async def read_buckets(
    broker: BrokerProtocol, buckets: Iterable[int]
) -> dict[str, RuntimeSchedule]:
    """Every schedule of ``buckets``, by id."""
    out: dict[str, RuntimeSchedule] = {}
    for n in sorted(buckets):
        entry = await shared(broker).read_state(keys.runtime_bucket(n))
        if entry is not None:
            out.update(decode_bucket(entry.value, n))
    return out


async def get_schedule(broker: BrokerProtocol, schedule_id: str) -> RuntimeSchedule | None:
    """The runtime schedule ``schedule_id``, or None."""
    validate_id(schedule_id)
    n = bucket_of(schedule_id)
    return (await read_buckets(broker, [n])).get(schedule_id)


async def list_schedules(broker: BrokerProtocol) -> list[RuntimeSchedule]:
    """Every runtime schedule, by id."""
    catalog = await read_catalog(broker)
    found = await read_buckets(broker, catalog.used)
    return [found[k] for k in sorted(found)]


def describe(schedule: RuntimeSchedule) -> str:
    kwargs = "" if not schedule.kwargs else f" kwargs={json.dumps(dict(schedule.kwargs))}"
    return f"{schedule.schedule.describe()} runs {schedule.job}{kwargs}"

"""The job message: what travels through a broker, and its JSON wire format.

The wire format is a JSON object, version 1::

    {"v": 1, "id": "...", "job": "name", "kwargs": {...},
     "enqueued_at": 1700000000.25, "scheduled_at": 1700000000 | null,
     "dedup_id": "tick:name:1700000000" | null, "not_after": 1700000035.0 | null}

``not_after`` (optional, absent in older messages) is the latest time at which
the message may still be stored: a tick must not be enqueued past its slot's
grace. Brokers that can check it when storing do, and the worker drops a
delivery whose broker says it was stored later.

``not_before`` (optional, absent when none) is when a delayed job becomes due
(``enqueue_at`` / ``enqueue_in``): the broker holds it until then.

``meta`` (optional, absent when empty) is an object of at most
:data:`MAX_META_ENTRIES` short strings that travel with the job without reaching
its handler: the trace context (``traceparent``, ``tracestate``) when tracing is on,
and :data:`CAUGHT_UP` on a tick enqueued late by catch-up.

``keep`` (optional, absent when the enqueuer does not say) is how many seconds the
job's status and result are kept after it finished; 0 keeps none. Without it the
worker keeps them as the job's ``keep_result`` says.

``kwargs`` nest arrays and objects at most :data:`MAX_NESTING` levels deep:
enqueue refuses deeper ones and the worker dead-letters them.

Everything read from a broker is validated by :func:`decode_message`; nothing
is ever unpickled or evaluated.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..errors import InvalidJobError, MessageDecodeError

WIRE_VERSION = 1
MAX_NAME_LENGTH = 200
# Names travel in dedup ids, subjects and keys: keep them to a safe alphabet.
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_DEDUP_ID_MAX = 512
MAX_ID_LENGTH = 200
# Job ids travel in logs and headers: printable, no spaces, bounded.
_ID_RE = re.compile(rf"[!-~]{{1,{MAX_ID_LENGTH}}}")
_LATEST = 253402300800  # 10000-01-01T00:00:00Z
# Deepest nesting of arrays and objects in kwargs (kwargs itself is level 1).
MAX_NESTING = 64
MAX_META_ENTRIES = 16
_META_KEY_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_META_VALUE_MAX = 1024
MAX_KEEP = 7 * 86_400.0  # the longest a memo lasts
_VALID_NAMES: set[str] = set()


def new_job_id() -> str:
    """A fresh, globally unique job id (128 random bits, hex)."""
    return os.urandom(16).hex()


_DERIVED_ID_NAMESPACE = uuid.UUID("6f1c1a52-6c1e-4d39-9a52-2f7b8f3c5e10")


def derived_job_id(deduplication_id: str) -> str:
    """The job id that ``deduplication_id`` gives, the same in every process: what a
    broker that cannot say which copy it kept (RabbitMQ) and the outbox, which names a
    job before any broker sees it, call the job."""
    return uuid.uuid5(_DERIVED_ID_NAMESPACE, deduplication_id).hex


def validate_job_name(name: object) -> str:
    """Return ``name`` if it is a valid job name, else raise :class:`InvalidJobError`."""
    if isinstance(name, str) and name in _VALID_NAMES:
        return name
    if not isinstance(name, str) or not name:
        raise InvalidJobError(f"job name must be a non-empty string, got {name!r}")
    if len(name) > MAX_NAME_LENGTH or not _NAME_RE.fullmatch(name):
        raise InvalidJobError(
            f"invalid job name {name!r}: use letters, digits, '_', '.', '-' "
            f"(starting with a letter or '_'), at most {MAX_NAME_LENGTH} characters"
        )
    if len(_VALID_NAMES) < 10_000:  # job names are few; bound the cache anyway
        _VALID_NAMES.add(name)
    return name


def validate_deduplication_id(dedup_id: object) -> str | None:
    """Return ``dedup_id`` if it is ``None`` or a usable id, else raise :class:`InvalidJobError`."""
    if dedup_id is None:
        return None
    if not isinstance(dedup_id, str) or not dedup_id:
        raise InvalidJobError(f"deduplication_id must be a non-empty string, got {dedup_id!r}")
    if len(dedup_id) > _DEDUP_ID_MAX or not dedup_id.isprintable():
        raise InvalidJobError(
            f"deduplication_id must be printable and at most {_DEDUP_ID_MAX} characters"
        )
    if dedup_id != dedup_id.strip():  # some brokers strip header values: ids would merge
        raise InvalidJobError("deduplication_id must not start or end with whitespace")
    return dedup_id


def due_time(when: object) -> float:
    """``when`` (an aware datetime, or unix seconds) as unix seconds; InvalidJobError else."""
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise InvalidJobError(f"when must be an aware datetime (tzinfo=UTC...), got {when!r}")
        when = when.timestamp()
    if isinstance(when, bool) or not isinstance(when, int | float) or not _is_time(when):
        raise InvalidJobError(f"when must be a unix time in seconds or a datetime, got {when!r}")
    return float(when)


def delay_seconds(delay: object) -> float:
    """``delay`` (seconds, or a timedelta) as seconds; InvalidJobError unless finite and >= 0."""
    if isinstance(delay, timedelta):
        delay = delay.total_seconds()
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        raise InvalidJobError(f"delay must be seconds or a timedelta, got {delay!r}")
    if not math.isfinite(delay) or not 0 <= delay < _LATEST:
        raise InvalidJobError(f"delay must be a finite number of seconds >= 0, got {delay!r}")
    return float(delay)


def _reject_non_finite(value: str) -> Any:
    raise ValueError(f"{value} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_non_finite)


def loads_strict(text: str | bytes) -> Any:
    """``json.loads`` that refuses NaN and Infinity, which are not JSON; bytes must be
    UTF-8 (``UnicodeDecodeError`` otherwise)."""
    return _DECODER.decode(text if isinstance(text, str) else text.decode())


_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"))
_quote = json.encoder.encode_basestring_ascii


def dumps_kwargs(job_name: str, kwargs: dict[str, Any]) -> str:
    """Serialize ``kwargs`` as strict JSON or raise :class:`InvalidJobError` naming the key."""
    try:
        return json.dumps(kwargs, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        bad = _first_bad_key(kwargs)
        where = f" (key {bad!r})" if bad is not None else ""
        raise InvalidJobError(
            f"kwargs of job {job_name!r} are not JSON-serializable{where}: {exc}"
        ) from None


def _first_bad_key(kwargs: dict[str, Any]) -> str | None:
    for key, value in kwargs.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            return key
    return None


def meta_problem(meta: object) -> str | None:
    """What is wrong with ``meta`` as a message's metadata, or None when it is fine."""
    if not isinstance(meta, dict):
        return "must be an object"
    if len(meta) > MAX_META_ENTRIES:
        return f"has {len(meta)} entries, more than {MAX_META_ENTRIES}"
    for key, value in meta.items():
        if not isinstance(key, str) or not _META_KEY_RE.fullmatch(key):
            return f"key {str(key)[:80]!r} is not 1-64 letters, digits, '_', '.' or '-'"
        if not isinstance(value, str) or len(value) > _META_VALUE_MAX or not value.isprintable():
            return f"value of {key!r} is not a printable string of at most {_META_VALUE_MAX}"
    return None


def new_message(
    job_name: str,
    deduplication_id: str | None,
    kwargs: dict[str, Any],
    *,
    not_before: float | None = None,
    keep: float | None = None,
) -> JobMessage:
    """A new job, its name and deduplication id validated (:class:`InvalidJobError`);
    ``not_before`` kept only while it is in the future."""
    now = time.time()
    return JobMessage(
        job_name=validate_job_name(job_name),
        kwargs=kwargs,
        deduplication_id=validate_deduplication_id(deduplication_id),
        enqueued_at=now,
        not_before=not_before if not_before is not None and not_before > now else None,
        keep=keep,
    )


@dataclass(frozen=True, slots=True)
class JobMessage:
    """One job as it travels through a broker."""

    job_name: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=new_job_id)
    deduplication_id: str | None = None
    enqueued_at: float = 0.0
    scheduled_at: int | None = None  # unix seconds of the schedule slot, ticked jobs only
    not_after: float | None = None  # latest unix time it may be stored (ticks: slot + grace)
    meta: dict[str, str] = field(default_factory=dict)  # e.g. the trace context
    not_before: float | None = None  # a delayed job: unix time it becomes due
    keep: float | None = None  # seconds its status and result are kept; None: the job's

    @property
    def due_ms(self) -> int | None:
        """``not_before`` in unix ms, rounded up: a broker comparing whole ms against it
        never hands the job out before its time."""
        return None if self.not_before is None else math.ceil(self.not_before * 1000)

    def encode(self) -> bytes:
        """The message's JSON wire form; raises :class:`InvalidJobError` for non-JSON kwargs."""
        try:
            kwargs = _ENCODER.encode(self.kwargs)
        except (TypeError, ValueError):
            dumps_kwargs(self.job_name, self.kwargs)  # raises, naming the key
            raise
        except RecursionError:
            kwargs = ""
        if not kwargs or _too_deep(kwargs, self.kwargs):
            raise InvalidJobError(
                f"kwargs of job {self.job_name!r} are nested more than {MAX_NESTING} levels deep"
            )
        # Hot path: the other fields are validated names, hex ids and numbers, so they
        # are formatted directly; only the free-form strings go through the escaper.
        if not math.isfinite(self.enqueued_at):
            raise InvalidJobError(f"enqueued_at of job {self.job_name!r} must be finite")
        dedup = "null" if self.deduplication_id is None else _quote(self.deduplication_id)
        scheduled = "null" if self.scheduled_at is None else str(int(self.scheduled_at))
        deadline = self._optional_fields()
        meta = ""
        if self.meta:
            if (problem := meta_problem(self.meta)) is not None:
                raise InvalidJobError(f"meta of job {self.job_name!r} {problem}")
            meta = f',"meta":{_ENCODER.encode(self.meta)}'
        return (
            f'{{"v":{WIRE_VERSION},"id":{_quote(self.id)},"job":{_quote(self.job_name)},'
            f'"enqueued_at":{float(self.enqueued_at)!r},"scheduled_at":{scheduled},'
            f'"dedup_id":{dedup}{deadline}{meta},"kwargs":{kwargs}}}'
        ).encode()

    def _optional_fields(self) -> str:
        """``not_after``, ``not_before`` and ``keep`` as wire fields, those that are set."""
        out = "" if self.not_after is None else f',"not_after":{float(self.not_after)!r}'
        if self.not_before is not None:
            if not _is_time(self.not_before):
                raise InvalidJobError(f"not_before of job {self.job_name!r} is not a unix time")
            out += f',"not_before":{float(self.not_before)!r}'
        if self.keep is not None:
            if not _is_keep(self.keep):
                raise InvalidJobError(
                    f"keep of job {self.job_name!r} must be 0 to {MAX_KEEP:g} seconds"
                )
            out += f',"keep":{float(self.keep)!r}'
        return out


#: The meta entry counting a job's snoozes (:class:`~framework_m_core.jobs.Snooze`).
SNOOZES = "snoozes"


def snoozes_of(message: JobMessage) -> int:
    """How many times ``message``'s job was snoozed before this copy (0: never)."""
    count = message.meta.get(SNOOZES, "0")
    return int(count) if count.isdigit() else 0


def snoozed(message: JobMessage, seconds: float) -> JobMessage:
    """The copy of ``message`` a snooze stores: the same job (id, kwargs, enqueue time,
    slot), due in ``seconds``, its snoozes counted, no deadline, and a deduplication id
    of its own (``snooze:{id}:{n}``) so that a snooze asked again stores one copy."""
    count = snoozes_of(message) + 1
    return dataclasses.replace(
        message,
        deduplication_id=f"snooze:{message.id}:{count}",
        not_after=None,
        not_before=time.time() + seconds if seconds > 0 else None,
        meta={**message.meta, SNOOZES: str(count)},
    )


def decode_message(body: bytes) -> JobMessage:
    """Parse and validate a wire message; raise :class:`MessageDecodeError` saying what is wrong.

    Whatever ``body`` holds, this returns a message or raises that error: nothing else.
    """
    data = _wire_object(body)
    job_id = data.get("id")
    if not isinstance(job_id, str) or not _ID_RE.fullmatch(job_id):
        raise MessageDecodeError(
            f"field 'id' must be 1-{MAX_ID_LENGTH} printable characters without spaces"
        )
    try:
        job_name = validate_job_name(data.get("job"))
        dedup_id = validate_deduplication_id(data.get("dedup_id"))
    except InvalidJobError as exc:
        raise MessageDecodeError(str(exc)) from None
    kwargs = data.get("kwargs")
    if not isinstance(kwargs, dict):
        raise MessageDecodeError("field 'kwargs' must be an object")
    if _too_deep(body, kwargs):
        raise MessageDecodeError(f"field 'kwargs' is nested more than {MAX_NESTING} levels deep")
    enqueued_at = data.get("enqueued_at")
    if not _is_time(enqueued_at):
        raise MessageDecodeError("field 'enqueued_at' must be a unix time in seconds")
    scheduled_at, not_after, not_before = _optional_times(data)
    meta = data.get("meta", {})
    if (problem := meta_problem(meta)) is not None:
        raise MessageDecodeError(f"field 'meta' {problem}")
    keep = data.get("keep")
    if keep is not None and not _is_keep(keep):
        raise MessageDecodeError(f"field 'keep' must be 0 to {MAX_KEEP:g} seconds or absent")
    return JobMessage(
        job_name=job_name,
        kwargs=kwargs,
        id=job_id,
        deduplication_id=dedup_id,
        enqueued_at=float(enqueued_at),  # type: ignore[arg-type]
        scheduled_at=scheduled_at,
        not_after=not_after,
        meta=meta,
        not_before=not_before,
        keep=None if keep is None else float(keep),
    )


def _wire_object(body: bytes) -> dict[str, Any]:
    """``body`` read as a JSON object of this wire version; MessageDecodeError else."""
    try:
        data = loads_strict(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise MessageDecodeError(f"body is not JSON: {_short(exc)}") from None
    except RecursionError:
        raise MessageDecodeError("body is JSON nested too deeply to read") from None
    if not isinstance(data, dict):
        raise MessageDecodeError(f"body is JSON {type(data).__name__}, not an object")
    if data.get("v") != WIRE_VERSION:
        raise MessageDecodeError(f"unsupported message version {data.get('v')!r}")
    return data


def _optional_times(data: dict[str, Any]) -> tuple[int | None, float | None, float | None]:
    """The message's ``scheduled_at``, ``not_after`` and ``not_before``, each None when
    absent or null; MessageDecodeError when one is not a unix time."""
    scheduled_at = data.get("scheduled_at")
    if scheduled_at is not None and (
        not isinstance(scheduled_at, int) or not _is_time(scheduled_at)
    ):
        raise MessageDecodeError("field 'scheduled_at' must be a whole unix time or null")
    not_after = data.get("not_after")
    if not_after is not None and not _is_time(not_after):
        raise MessageDecodeError("field 'not_after' must be a unix time or null")
    not_before = data.get("not_before")
    if not_before is not None and not _is_time(not_before):
        raise MessageDecodeError("field 'not_before' must be a unix time or null")
    return (
        scheduled_at,
        None if not_after is None else float(not_after),
        None if not_before is None else float(not_before),
    )


def _too_deep(text: str | bytes, kwargs: dict[str, Any]) -> bool:
    """Whether ``kwargs`` (serialized in ``text``) nests deeper than :data:`MAX_NESTING`."""
    if isinstance(text, str):
        brackets = text.count("[") + text.count("{")
    else:
        brackets = text.count(b"[") + text.count(b"{")
    if brackets <= MAX_NESTING:  # the common case: too few brackets to be that deep
        return False
    stack: list[tuple[object, int]] = [(kwargs, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Iterable[object] = value.values()
        elif isinstance(value, list | tuple):
            children = value
        else:
            continue
        if depth > MAX_NESTING:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _is_time(value: object) -> bool:
    """A unix time a datetime can hold (years 1970 to 9999)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    return 0 <= value < _LATEST  # false for NaN; no float() of a huge int


def _is_keep(value: object) -> bool:
    """Seconds to keep a status: 0 (none) to :data:`MAX_KEEP`."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    return 0 <= value <= MAX_KEEP


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:200] + "..."


def tick_deduplication_id(job_name: str, slot: int) -> str:
    """The deduplication id every replica computes for ``job_name``'s slot at ``slot`` (unix s)."""
    return f"tick:{job_name}:{slot}"


TRIGGER_PREFIX = "trigger:"
#: The ``meta`` entry (value ``"1"``) of a tick that catch-up enqueued after its slot's
#: grace: behind a running run of its schedule it waits its turn, never skipped.
CAUGHT_UP = "caught_up"


def caught_up(message: JobMessage) -> bool:
    """Whether ``message`` is a missed slot that catch-up enqueued late."""
    return message.meta.get(CAUGHT_UP) == "1"


TICK_PREFIX = "tick:"


def schedule_of(deduplication_id: str | None) -> str | None:
    """The schedule a message was ticked or triggered for, from its dedup id: a job's
    name, or ``@{id}`` for a runtime schedule; None for any other message."""
    if deduplication_id is None:
        return None
    for prefix in (TICK_PREFIX, TRIGGER_PREFIX):
        if deduplication_id.startswith(prefix):
            name, sep, _ = deduplication_id[len(prefix) :].rpartition(":")
            return name if sep and name else None
    return None


def trigger_deduplication_id(job_name: str, token: str) -> str:
    """The deduplication id of one trigger of ``job_name``: never equal to a tick's."""
    return f"{TRIGGER_PREFIX}{job_name}:{token}"

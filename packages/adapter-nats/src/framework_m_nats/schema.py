"""NATS schema sync: the job stream, the dead-letter stream, the shared pull consumer and
the one that moves delayed jobs when they are due.

The stream keeps *limits* retention: JetStream rebuilds its duplicate map after
a restart only from messages still stored, so a work-queue stream (which deletes
acked messages) would forget an acked tick's id and let a late replica enqueue
the slot again. Messages are kept for ``max_age`` (>= the dedup window), but
consuming workers purge acked ones older than the window (trimming.py); the
durable consumer's ack floor, not deletion, records what is done.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import APIError, NotFoundError

from framework_m_core.ports import BrokerError, SchemaChange, SchemaPlan, SchemaRaceError

from .settings import NatsSettings

# Fields that JetStream updates in place, compared between the server and the code.
_STREAM_FIELDS = ("subjects", "duplicate_window", "max_age", "num_replicas")
_CONSUMER_FIELDS = ("ack_wait", "max_deliver", "max_ack_pending", "filter_subject")
_CONSUMER_FIXED = ("ack_policy", "deliver_policy")


def job_stream(s: NatsSettings) -> StreamConfig:
    return StreamConfig(
        name=s.stream,
        subjects=[s.jobs_subject, s.delayed_subject],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        duplicate_window=s.dedup_window,
        max_age=s.max_age,
        num_replicas=s.replicas,
    )


def dead_letter_stream(s: NatsSettings) -> StreamConfig:
    return StreamConfig(
        name=s.dead_letter_stream,
        subjects=[s.dead_subject],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        discard=DiscardPolicy.OLD,
        duplicate_window=min(120.0, s.dead_letter_max_age),
        max_age=s.dead_letter_max_age,
        num_replicas=s.replicas,
    )


def consumer(s: NatsSettings) -> ConsumerConfig:
    return ConsumerConfig(
        durable_name=s.consumer,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=s.ack_wait,
        # Attempts are counted by the worker, which dead-letters with a reason;
        # a server-side limit would drop exhausted messages with only an advisory.
        max_deliver=-1,
        max_ack_pending=s.max_ack_pending,
        filter_subject=s.jobs_subject,
    )


def delayed_consumer(s: NatsSettings) -> ConsumerConfig:
    """Reads the delayed jobs: each is held (a delayed nak) until due, then moved."""
    return dataclasses.replace(
        consumer(s), durable_name=s.delayed_consumer, filter_subject=s.delayed_subject
    )


@dataclass(frozen=True)
class _Step:
    kind: str  # "stream" | "consumer"
    config: Any  # the full StreamConfig/ConsumerConfig to apply
    create: bool


def _show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}s"
    if hasattr(value, "value"):
        return str(value.value)
    if isinstance(value, str):
        return value
    return repr(value)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(float(a) - float(b)) < 1e-6
    if isinstance(a, list) and isinstance(b, list):
        return sorted(a) == sorted(b)
    return bool(a == b)


async def _plan_stream(js: JetStreamContext, want: StreamConfig) -> list[SchemaChange]:
    target = f"stream {want.name}"
    try:
        info = await js.stream_info(want.name or "")
    except NotFoundError:
        return [SchemaChange("create", target, _describe_stream(want), _Step("stream", want, True))]
    have = info.config
    if have.storage != want.storage:
        return [_refuse(target, "storage", have.storage, want.storage, info.state.messages)]
    if have.retention != want.retention:
        return [_refuse(target, "retention", have.retention, want.retention, info.state.messages)]
    diffs = [
        f"{name} {_show(getattr(have, name))} -> {_show(getattr(want, name))}"
        for name in _STREAM_FIELDS
        if not _same(getattr(have, name), getattr(want, name))
    ]
    if not diffs:
        return []
    merged = dataclasses.replace(have, **{name: getattr(want, name) for name in _STREAM_FIELDS})
    return [SchemaChange("update", target, ", ".join(diffs), _Step("stream", merged, False))]


def _refuse(target: str, field: str, have: Any, want: Any, messages: int) -> SchemaChange:
    detail = (
        f"{field} is {_show(have)} on the server, framework-m needs {_show(want)}; JetStream "
        f"cannot change {field} in place. Manual steps: stop all workers; move the "
        f"{messages} stored message(s) aside if you need them (e.g. `nats stream backup`); "
        f"delete the stream (`nats stream rm {target.split()[-1]}`); run `m sync-schema`"
    )
    return SchemaChange("refuse", target, detail)


def _describe_stream(c: StreamConfig) -> str:
    return (
        f"subjects {c.subjects}, {_show(c.retention)} retention, {_show(c.storage)} storage, "
        f"duplicate_window {_show(c.duplicate_window)}, max_age {_show(c.max_age)}, "
        f"replicas {c.num_replicas}"
    )


async def _plan_consumer(
    js: JetStreamContext, stream: str, want: ConsumerConfig
) -> list[SchemaChange]:
    target = f"consumer {stream}/{want.durable_name}"
    try:
        info = await js.consumer_info(stream, want.durable_name or "")
    except NotFoundError:
        detail = f"durable pull consumer, explicit ack, ack_wait {_show(want.ack_wait)}"
        return [SchemaChange("create", target, detail, _Step("consumer", want, True))]
    have = info.config
    for name in _CONSUMER_FIXED:
        if not _same(getattr(have, name), getattr(want, name)):
            detail = (
                f"{name} is {_show(getattr(have, name))}, framework-m needs "
                f"{_show(getattr(want, name))}; it cannot change in place. Manual steps: stop "
                f"all workers, delete the consumer (`nats consumer rm {stream} "
                f"{want.durable_name}`) and run `m sync-schema`; unacked messages are "
                "delivered again"
            )
            return [SchemaChange("refuse", target, detail)]
    diffs = [
        f"{name} {_show(getattr(have, name))} -> {_show(getattr(want, name))}"
        for name in _CONSUMER_FIELDS
        if not _same(getattr(have, name), getattr(want, name))
    ]
    if not diffs:
        return []
    merged = dataclasses.replace(have, **{name: getattr(want, name) for name in _CONSUMER_FIELDS})
    return [SchemaChange("update", target, ", ".join(diffs), _Step("consumer", merged, False))]


async def plan(js: JetStreamContext, s: NatsSettings) -> SchemaPlan:
    """Every change needed, in order; refusals included; limits that can drop jobs."""
    job_changes = await _plan_stream(js, job_stream(s))
    changes = job_changes + await _plan_stream(js, dead_letter_stream(s))
    if not any(c.action == "refuse" for c in job_changes):
        changes += await _plan_consumer(js, s.stream, consumer(s))
        changes += await _plan_consumer(js, s.stream, delayed_consumer(s))
    warnings = [w for name in (s.stream, s.dead_letter_stream) for w in await _limits(js, name)]
    return SchemaPlan(tuple(changes), tuple(warnings))


# Caps an operator may set on a stream; framework-m sets none of them.
_CAPS = ("max_msgs", "max_bytes", "max_msgs_per_subject")


async def _limits(js: JetStreamContext, stream: str) -> list[str]:
    """What an operator-set cap on ``stream`` does to jobs, if it has one."""
    try:
        have = (await js.stream_info(stream)).config
    except NotFoundError:
        return []
    caps = [
        f"{name} {value}" for name in _CAPS if (value := getattr(have, name)) not in (None, -1, 0)
    ]
    if not caps:
        return []
    if have.discard == DiscardPolicy.NEW:
        effect = "a full stream refuses new jobs (enqueue fails)"
    else:
        effect = "a full stream silently deletes its oldest messages, unrun jobs included"
    return [
        f"stream {stream} is capped ({', '.join(caps)}; discard {_show(have.discard)}): "
        f"{effect}; acked jobs stay stored for the dedup window, so size the cap for the "
        "jobs waiting in a worker outage plus a window's worth"
    ]


async def apply(js: JetStreamContext, s: NatsSettings, plan: SchemaPlan) -> None:
    """Carry out a plan without refusals."""
    for change in plan.changes:
        step: _Step = change.step
        try:
            if step.kind == "stream" and step.create:
                await js.add_stream(step.config)
            elif step.kind == "stream":
                await js.update_stream(step.config)
            else:
                await js.add_consumer(s.stream, step.config)
        except APIError as exc:
            if exc.err_code == 10058:  # created concurrently by another replica
                raise SchemaRaceError(str(change)) from None
            if exc.err_code == _ERR_SUBJECTS_OVERLAP and step.kind == "stream":
                raise BrokerError(await _overlap(js, change, step.config)) from None
            raise BrokerError(f"{change}: the server refused: {exc.description}") from None


_ERR_SUBJECTS_OVERLAP = 10065


async def _overlap(js: JetStreamContext, change: SchemaChange, config: StreamConfig) -> str:
    """Why ``change`` was refused: which existing stream takes its subjects, and the fix."""
    wanted = set(config.subjects or ())
    others = [
        f"{info.config.name} ({', '.join(info.config.subjects or ())})"
        for info in await js.streams_info()
        if info.config.name != config.name and _overlapping(wanted, info.config.subjects or ())
    ]
    return (
        f"{change}: the server refused: its subjects overlap with stream "
        f"{' and '.join(others) or '(unknown)'}; give this queue subjects of its own with "
        "queue=NAME in the URL (or subject_prefix beside stream)"
    )


def _overlapping(ours: set[str], theirs: Iterable[str]) -> bool:
    """Whether any subject of ``theirs`` matches or is matched by one of ``ours``."""
    return any(_matches(a, b) or _matches(b, a) for a in ours for b in theirs)


def _matches(pattern: str, subject: str) -> bool:
    """Whether NATS subject ``pattern`` (with ``*`` and ``>``) covers ``subject``."""
    p, t = pattern.split("."), subject.split(".")
    for i, token in enumerate(p):
        if token == ">":
            return len(t) > i
        if i >= len(t) or (token != "*" and token != t[i]):
            return False
    return len(p) == len(t)

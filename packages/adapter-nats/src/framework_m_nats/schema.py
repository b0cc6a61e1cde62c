"""NATS schema sync: the job stream, the dead-letter stream and the shared pull consumer.

The stream keeps *limits* retention: JetStream rebuilds its duplicate map after
a restart only from messages still stored, so a work-queue stream (which deletes
acked messages) would forget an acked tick's id and let a late replica enqueue
the slot again. Messages are kept for ``max_age`` (>= the dedup window); the
durable consumer's ack floor, not deletion, records what is done.
"""

from __future__ import annotations

import dataclasses
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

from framework_m_core.errors import BrokerError, SchemaConflictError
from framework_m_core.schema import SchemaChange, SchemaPlan

from .settings import NatsSettings

# Fields that JetStream updates in place, compared between the server and the code.
_STREAM_FIELDS = ("subjects", "duplicate_window", "max_age", "num_replicas")
_CONSUMER_FIELDS = ("ack_wait", "max_deliver", "max_ack_pending", "filter_subject")
_CONSUMER_FIXED = ("ack_policy", "deliver_policy")


def job_stream(s: NatsSettings) -> StreamConfig:
    return StreamConfig(
        name=s.stream,
        subjects=[s.jobs_subject],
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


@dataclass
class _Step:
    change: SchemaChange
    kind: str  # "stream" | "consumer"
    config: Any  # the config to apply: full StreamConfig/ConsumerConfig
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


async def _plan_stream(js: JetStreamContext, want: StreamConfig) -> list[_Step]:
    target = f"stream {want.name}"
    try:
        info = await js.stream_info(want.name or "")
    except NotFoundError:
        return [_Step(SchemaChange("create", target, _describe_stream(want)), "stream", want, True)]
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
    return [_Step(SchemaChange("update", target, ", ".join(diffs)), "stream", merged, False)]


def _refuse(target: str, field: str, have: Any, want: Any, messages: int) -> _Step:
    detail = (
        f"{field} is {_show(have)} on the server, framework-m needs {_show(want)}; JetStream "
        f"cannot change {field} in place. Manual steps: stop all workers; move the "
        f"{messages} stored message(s) aside if you need them (e.g. `nats stream backup`); "
        f"delete the stream (`nats stream rm {target.split()[-1]}`); run `m migrate`"
    )
    return _Step(SchemaChange("refuse", target, detail), "stream", None, False)


def _describe_stream(c: StreamConfig) -> str:
    return (
        f"subjects {c.subjects}, {_show(c.retention)} retention, {_show(c.storage)} storage, "
        f"duplicate_window {_show(c.duplicate_window)}, max_age {_show(c.max_age)}, "
        f"replicas {c.num_replicas}"
    )


async def _plan_consumer(js: JetStreamContext, stream: str, want: ConsumerConfig) -> list[_Step]:
    target = f"consumer {stream}/{want.durable_name}"
    try:
        info = await js.consumer_info(stream, want.durable_name or "")
    except NotFoundError:
        detail = f"durable pull consumer, explicit ack, ack_wait {_show(want.ack_wait)}"
        return [_Step(SchemaChange("create", target, detail), "consumer", want, True)]
    have = info.config
    for name in _CONSUMER_FIXED:
        if not _same(getattr(have, name), getattr(want, name)):
            detail = (
                f"{name} is {_show(getattr(have, name))}, framework-m needs "
                f"{_show(getattr(want, name))}; it cannot change in place. Manual steps: stop "
                f"all workers, delete the consumer (`nats consumer rm {stream} "
                f"{want.durable_name}`) and run `m migrate`; unacked messages are delivered again"
            )
            return [_Step(SchemaChange("refuse", target, detail), "consumer", None, False)]
    diffs = [
        f"{name} {_show(getattr(have, name))} -> {_show(getattr(want, name))}"
        for name in _CONSUMER_FIELDS
        if not _same(getattr(have, name), getattr(want, name))
    ]
    if not diffs:
        return []
    merged = dataclasses.replace(have, **{name: getattr(want, name) for name in _CONSUMER_FIELDS})
    return [_Step(SchemaChange("update", target, ", ".join(diffs)), "consumer", merged, False)]


async def plan(js: JetStreamContext, s: NatsSettings) -> list[_Step]:
    """Every step needed, in order; refusals included."""
    job_steps = await _plan_stream(js, job_stream(s))
    steps = job_steps + await _plan_stream(js, dead_letter_stream(s))
    if not any(st.change.action == "refuse" for st in job_steps):
        steps += await _plan_consumer(js, s.stream, consumer(s))
    return steps


def as_plan(steps: list[_Step]) -> SchemaPlan:
    return SchemaPlan(tuple(st.change for st in steps))


async def apply(js: JetStreamContext, s: NatsSettings, steps: list[_Step]) -> None:
    """Apply a plan that has no refusals."""
    refused = [st.change for st in steps if st.change.action == "refuse"]
    if refused:
        raise SchemaConflictError("; ".join(str(c) for c in refused))
    for st in steps:
        try:
            if st.kind == "stream" and st.create:
                await js.add_stream(st.config)
            elif st.kind == "stream":
                await js.update_stream(st.config)
            else:
                await js.add_consumer(s.stream, st.config)
        except APIError as exc:
            if exc.err_code == 10058:  # created concurrently by another replica
                raise _Retry from None
            raise BrokerError(f"{st.change}: the server refused: {exc.description}") from None


class _Retry(Exception):
    """Another replica changed the schema at the same moment: plan again."""


async def sync(js: JetStreamContext, s: NatsSettings, *, dry_run: bool) -> SchemaPlan:
    """Plan, and unless ``dry_run`` apply; re-plan once if another replica raced us."""
    for _ in range(3):
        steps = await plan(js, s)
        if dry_run or not steps:
            return as_plan(steps)
        try:
            await apply(js, s, steps)
            return as_plan(steps)
        except _Retry:
            continue
    raise BrokerError("schema sync kept racing with other replicas; try again")

"""Schema sync against the real server: create, migrate in place, refuse what cannot change."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator

import nats
import pytest
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from framework_m_core import SchemaConflictError, decode_message
from framework_m_core.testing import receive_all
from framework_m_nats import NatsBroker, parse_url
from framework_m_nats.testing import NatsNamespace

from .conftest import NATS_URL

pytestmark = pytest.mark.anyio


@pytest.fixture
async def js() -> AsyncIterator[nats.js.JetStreamContext]:
    nc = await nats.connect(NATS_URL)
    yield nc.jetstream()
    await nc.close()


async def pre_existing(js: nats.js.JetStreamContext, url: str, **config: object) -> None:
    s = parse_url(url)
    base: dict[str, object] = {
        "name": s.stream,
        "subjects": [s.jobs_subject],
        "duplicate_window": 30.0,
        "max_age": 3600.0,
    }
    base.update(config)
    await js.add_stream(StreamConfig(**base))  # type: ignore[arg-type]


async def test_creates_everything_then_is_idempotent(namespace: NatsNamespace) -> None:
    async with NatsBroker.from_url(namespace.url()) as broker:
        plan = await broker.sync_schema()
        assert [c.action for c in plan.changes] == ["create"] * 4  # streams, 2 consumers
        assert "_delayed" in plan.describe()
        assert "duplicate_window 120s" in plan.describe()
        assert (await broker.sync_schema()).in_sync
        assert broker.dedup_window == 120


async def test_a_30s_window_is_migrated_in_place_keeping_queued_messages(
    js: nats.js.JetStreamContext, namespace: NatsNamespace
) -> None:
    url = namespace.url(dedup_window=120, max_age=86400)
    await pre_existing(js, url, duplicate_window=30.0)
    async with NatsBroker.from_url(url) as broker:
        assert broker.dedup_window == 30  # read from the server, not the URL
        await broker.requeue(b"")  # a message that is not a job
        ids = [await broker.enqueue("job", deduplication_id=f"d{i}") for i in range(3)]
        plan = await broker.plan_schema()
        assert "update stream" in plan.describe()
        assert "duplicate_window 30s -> 120s" in plan.describe()
        assert "max_age 3600s -> 86400s" in plan.describe()
        assert broker.dedup_window == 30  # planning changes nothing
        await broker.sync_schema()
        assert broker.dedup_window == 120
        info = await js.stream_info(parse_url(url).stream)
        assert info.config.duplicate_window == 120
        assert info.state.messages == 4
        bodies = [d.body for d in await receive_all(broker)]
        assert [decode_message(b).id for b in bodies if b] == ids
        assert await broker.enqueue("job", deduplication_id="d1") == ids[1]  # ids kept


async def test_memory_storage_is_refused_with_the_manual_steps(
    js: nats.js.JetStreamContext, namespace: NatsNamespace
) -> None:
    url = namespace.url()
    await pre_existing(js, url, storage=StorageType.MEMORY, duplicate_window=120.0)
    stream = parse_url(url).stream
    async with NatsBroker.from_url(url) as broker:
        plan = await broker.sync_schema(dry_run=True)
        [refusal] = plan.refused
        assert refusal.target == f"stream {stream}"
        assert "storage is memory on the server, framework-m needs file" in refusal.detail
        assert f"nats stream rm {stream}" in refusal.detail
        with pytest.raises(SchemaConflictError, match="storage is memory"):
            await broker.sync_schema()
    info = await js.stream_info(stream)
    assert info.config.storage == StorageType.MEMORY  # nothing was changed


async def test_work_queue_retention_is_refused(
    js: nats.js.JetStreamContext, namespace: NatsNamespace
) -> None:
    url = namespace.url()
    await pre_existing(js, url, retention=RetentionPolicy.WORK_QUEUE)
    async with NatsBroker.from_url(url) as broker:
        with pytest.raises(SchemaConflictError, match="retention is workqueue on the server"):
            await broker.sync_schema()


async def test_consumer_settings_are_updated_in_place(
    js: nats.js.JetStreamContext, namespace: NatsNamespace
) -> None:
    async with NatsBroker.from_url(namespace.url(ack_wait=30)) as broker:
        await broker.sync_schema()
        await broker.enqueue("job")
        [taken] = await broker.receive(1, 5)
        await broker.ack(taken)
        await broker.enqueue("job")
    async with NatsBroker.from_url(namespace.url(ack_wait=5)) as broker:
        assert broker.visibility_timeout == 30
        plan = await broker.sync_schema()
        assert "ack_wait 30s -> 5s" in plan.describe()
        assert broker.visibility_timeout == 5
        [second] = await broker.receive(10, 5)  # the acked one is not delivered again
        assert second.attempt == 1
        assert await broker.receive(10, 0.5) == []


async def test_a_cap_an_operator_set_is_reported_and_left_alone(
    js: nats.js.JetStreamContext, namespace: NatsNamespace
) -> None:
    url = namespace.url()
    async with NatsBroker.from_url(url) as broker:
        await broker.sync_schema()
        s = broker.settings
        info = await js.stream_info(s.stream)
        await js.update_stream(dataclasses.replace(info.config, max_msgs=1000, max_bytes=10**6))
        plan = await broker.plan_schema()
        assert plan.in_sync  # nothing to change: the cap is the operator's
        [warning] = plan.warnings
        assert f"stream {s.stream} is capped (max_msgs 1000, max_bytes 1000000; discard old)" in (
            warning
        )
        assert "silently deletes its oldest messages" in warning
        assert f"warning: stream {s.stream} is capped" in plan.describe()
        info = await js.stream_info(s.stream)
        await js.update_stream(dataclasses.replace(info.config, discard=DiscardPolicy.NEW))
        [warning] = (await broker.sync_schema()).warnings
        assert "a full stream refuses new jobs" in warning


async def test_two_queues_on_one_server_keep_their_jobs_apart() -> None:
    from uuid import uuid4

    names = [f"fmtest_{uuid4().hex[:12]}", f"fmtest_{uuid4().hex[:12]}"]
    urls = [f"{NATS_URL}?queue={name}" for name in names]
    try:
        async with NatsBroker.from_url(urls[0]) as a, NatsBroker.from_url(urls[1]) as b:
            await a.sync_schema()
            await b.sync_schema()  # no "subjects overlap": each queue has its own
            await a.enqueue("only_a", n=1)
            await b.enqueue("only_b", n=2)
            got_a = [decode_message(d.body).job_name for d in await receive_all(a, quiet=0.3)]
            got_b = [decode_message(d.body).job_name for d in await receive_all(b, quiet=0.3)]
        assert (got_a, got_b) == (["only_a"], ["only_b"])
    finally:
        nc = await nats.connect(NATS_URL)
        for name in names:
            for stream in (f"{name}_jobs", f"{name}_jobs_dead", f"KV_{name}_jobs_memos"):
                with contextlib.suppress(nats.js.errors.NotFoundError):
                    await nc.jetstream().delete_stream(stream)
        await nc.close()


async def test_an_enqueue_before_schema_sync_says_to_run_it(namespace: NatsNamespace) -> None:
    from framework_m_core import BrokerError

    async with NatsBroker.from_url(namespace.url()) as broker:
        with pytest.raises(BrokerError, match=r"no stream takes .*: run `m sync-schema`"):
            await broker.enqueue("early")


async def test_a_stream_whose_subjects_another_stream_takes_names_it(
    namespace: NatsNamespace, js: nats.js.JetStreamContext
) -> None:
    from framework_m_core import BrokerError

    async with NatsBroker.from_url(namespace.url()) as first:
        await first.sync_schema()
    other = f"{namespace.name}_other"
    try:
        from framework_m_core.testing.namespaces import with_option

        async with NatsBroker.from_url(with_option(namespace.url(), "stream", other)) as second:
            with pytest.raises(BrokerError) as refused:
                await second.sync_schema()
        message = str(refused.value)
        assert f"its subjects overlap with stream {namespace.name} (" in message
        assert "queue=NAME" in message
    finally:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_stream(other)

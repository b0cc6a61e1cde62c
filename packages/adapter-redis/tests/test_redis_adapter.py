"""Redis specifics: URL parsing, schema sync, queue bound, key layout, queue stats."""

from __future__ import annotations

import asyncio
import re
import socket

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from framework_m_core import (
    BrokerError,
    ConfigurationError,
    Delivery,
    DeliveryLostError,
    QueueStats,
    SchemaConflictError,
    SchemaMissingError,
)
from framework_m_core.adapters.registry import open_broker
from framework_m_core.testing import PROMPT
from framework_m_redis import RedisBroker, parse_url
from framework_m_redis import stats as redis_stats
from framework_m_redis.connection import WaitingPool
from framework_m_redis.testing import RedisNamespace

from .conftest import REDIS_URL

pytestmark = pytest.mark.anyio


def test_url_options() -> None:
    s = parse_url("rediss://app:pw@host:6380/2?queue=mail&dedup_window=60&ssl_cert_reqs=none")
    assert (s.queue, s.dedup_window, s.group) == ("mail", 60, "workers")
    assert s.client_url == "rediss://app:pw@host:6380/2?ssl_cert_reqs=none"
    assert "pw" not in s.display_url
    assert s.stream == "fm:{mail}:jobs"
    assert s.dedup_key("tick:x:1") == "fm:{mail}:dedup:tick:x:1"
    assert isinstance(open_broker("redis://127.0.0.1:6379/0"), RedisBroker)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://h?queue=a{b}", "queue 'a{b}' must be"),
        ("redis://h?colour=red", "unknown option 'colour'"),
        ("redis://h?max_len=lots", "must be a int"),
        ("redis://h?visibility_timeout=0", "visibility_timeout must be at least"),
        ("redis://?queue=x", "names no host"),
        ("redis://h/zero", "the path is the database number, got 'zero'"),
        ("redis://h/0/1", "the path is the database number, got '0/1'"),
    ],
)
def test_invalid_urls(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("{", r"\{").replace("}", r"\}")):
        parse_url(url)


def test_a_sentinel_url_names_its_sentinels_master_and_credentials() -> None:
    s = parse_url(
        "redis+sentinel://app:p%40ss@s1:26380,s2,[::1]:26381/mymaster/3"
        "?queue=mail&sentinel_username=watch&sentinel_password=hush&socket_timeout=2"
    )
    assert s.sentinels == (("s1", 26380), ("s2", 26379), ("::1", 26381))
    assert (s.master, s.queue, s.sentinel_username, s.sentinel_password) == (
        "mymaster", "mail", "watch", "hush",
    )  # fmt: skip
    assert s.client_url == "redis://app:p%40ss@sentinel/3?socket_timeout=2"
    assert "p%40ss" not in s.display_url
    assert "hush" not in s.display_url
    assert "hush" not in repr(s)
    assert s.replicas_to_wait_for == 1  # on by default with Sentinel
    assert parse_url("redis+sentinel://s1/m?wait_replicas=0").replicas_to_wait_for == 0
    assert parse_url("redis://h?wait_replicas=2").replicas_to_wait_for == 2
    assert parse_url("redis://h").replicas_to_wait_for == 0
    assert parse_url("rediss+sentinel://s1/m").client_url.startswith("rediss://")
    assert isinstance(open_broker("redis+sentinel://127.0.0.1:26379/m"), RedisBroker)


def test_a_cluster_url_names_its_seeds_in_order() -> None:
    s = parse_url("redis://app:p%40ss@n1:7000,n2,[::1]:7002/0?cluster=1&socket_timeout=2")
    assert s.seeds == (("n1", 7000), ("n2", 6379), ("::1", 7002))
    assert s.client_url == "redis://app:p%40ss@n1:7000/0?socket_timeout=2"  # for redis-py
    assert "p%40ss" not in s.display_url
    assert "n2,[::1]:7002" in s.display_url
    assert parse_url("redis://n1:7000/0?cluster=1").seeds == ()  # one host: redis-py's own


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://n1:7000,n2:7001/0", "names several hosts: that is for a Redis Cluster's seeds"),
        ("redis://n1:7000,:7001/0?cluster=1", "':7001' is not a cluster node's host:port"),
        ("redis://n1:7000,n2:70000?cluster=1", "'n2:70000' is not a cluster node's host:port"),
    ],
)
def test_invalid_cluster_urls(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        parse_url(url)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+sentinel://s1:26379", "names no master: the path is /MASTER"),
        ("redis+sentinel://s1/m/0/1", "the path is /MASTER"),
        ("redis+sentinel://s1/m/zero", "the path is the database number, got 'zero'"),
        ("redis+sentinel://s1:x/m", "'s1:x' is not a sentinel's host:port"),
        ("redis+sentinel://s1,,s2/m", "'' is not a sentinel's host:port"),
        ("redis+sentinel://s1/m?cluster=1", "cluster=1 and Sentinel exclude each other"),
        ("redis+sentinel://s1/m?wait_replicas=-1", "wait_replicas must be between 0"),
        ("redis+sentinel://s1/m?wait_timeout=0", "wait_timeout must be between"),
        ("redis://h?sentinel_password=x", "'sentinel_password' is for redis+sentinel://"),
    ],
)
def test_invalid_sentinel_urls(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(message)) as raised:
        parse_url(url)
    assert "sentinel_password=x" not in str(raised.value)


async def test_a_missing_group_is_a_schema_missing_error(namespace: RedisNamespace) -> None:
    async with RedisBroker.from_url(namespace.url()) as broker:
        await broker.sync_schema()
        await broker.client.delete(broker.settings.stream)  # Redis restarted empty, say
        with pytest.raises(SchemaMissingError, match=r"consumer group workers of .* does not"):
            await broker.receive(1, 0.1)
        await broker.sync_schema()
        assert await broker.receive(1, 0.1) == []


@pytest.mark.parametrize("url", ["redis://h", "redis://h/", "redis://h/0", "redis://h/15"])
def test_a_url_names_its_database_by_number_or_not_at_all(url: str) -> None:
    assert parse_url(url).client_url.startswith(url)


async def test_schema_sync_creates_group_and_marker_then_is_idempotent(
    namespace: RedisNamespace,
) -> None:
    async with RedisBroker.from_url(namespace.url()) as broker:
        plan = await broker.plan_schema()
        assert [c.action for c in plan.changes] == ["create", "create"]
        assert (await broker.sync_schema(dry_run=True)).changes == plan.changes
        assert not (await broker.plan_schema()).in_sync  # dry run changed nothing
        await broker.sync_schema()
        assert (await broker.plan_schema()).in_sync
        assert await broker.client.hget(broker.settings.meta, "layout") == b"1"


async def test_a_newer_layout_is_refused(namespace: RedisNamespace) -> None:
    async with RedisBroker.from_url(namespace.url()) as broker:
        await broker.client.hset(broker.settings.meta, "layout", 99)
        with pytest.raises(SchemaConflictError, match="key layout 99 was written by a newer"):
            await broker.sync_schema()


async def test_receive_without_the_group_says_to_sync_the_schema(
    namespace: RedisNamespace,
) -> None:
    async with RedisBroker.from_url(namespace.url()) as broker:
        await broker.requeue(b"x")
        with pytest.raises(BrokerError, match="run schema sync"):
            await broker.receive(1, 0.1)


async def test_a_full_queue_refuses_instead_of_dropping(
    namespace: RedisNamespace,
) -> None:
    async with RedisBroker.from_url(namespace.url(max_len=2)) as broker:
        await broker.sync_schema()
        await broker.enqueue("job")
        await broker.enqueue("job", deduplication_id="kept")
        with pytest.raises(BrokerError, match="holds max_len=2 jobs"):
            await broker.enqueue("job", deduplication_id="refused")
        # the refused enqueue left no dedup key behind: it can be sent once there is room
        [first, _] = await broker.receive(10, 1)
        await broker.ack(first)
        assert await broker.enqueue("job", deduplication_id="refused")
        assert broker.stats.duplicates == 0


async def test_dedup_key_lives_exactly_the_window(namespace: RedisNamespace) -> None:
    async with RedisBroker.from_url(namespace.url(dedup_window=60)) as broker:
        await broker.sync_schema()
        job_id = await broker.enqueue("job", deduplication_id="tick:job:1")
        client = aioredis.Redis.from_url(REDIS_URL)
        key = broker.settings.dedup_key("tick:job:1")
        assert await client.get(key) == job_id.encode()
        assert 59_000 < await client.pttl(key) <= 60_000
        await client.aclose()


async def test_a_closing_consumer_releases_its_entries_and_leaves_the_group(
    namespace: RedisNamespace,
) -> None:
    url = namespace.url(visibility_timeout=60)
    async with RedisBroker.from_url(url) as admin:
        await admin.sync_schema()
        idle, holding, stuck = (RedisBroker.from_url(url) for _ in range(3))
        for broker in (idle, holding, stuck):
            await broker.connect()
        assert await idle.receive(1, 0.05) == []  # joins the group, takes nothing
        await admin.enqueue("job", n=1)
        await admin.enqueue("job", n=2)
        [taken] = await holding.receive(1, 2)
        [kept] = await stuck.receive(1, 2)

        async def cannot(delivery: Delivery) -> None:
            raise BrokerError("connection lost")

        stuck.release = cannot  # type: ignore[method-assign]
        for broker in (idle, holding, stuck):
            await broker.close()
        s = admin.settings
        names = {c["name"].decode() for c in await admin.client.xinfo_consumers(s.stream, s.group)}
        assert names == {stuck.consumer}  # its entry stays pending, for XAUTOCLAIM
        [back] = await admin.receive(10, 2)
        assert (back.body, back.attempt) == (taken.body, 1)  # released: not an attempt
        assert kept.body != taken.body


async def test_hostile_attempt_fields_count_as_the_deliveries_alone(
    namespace: RedisNamespace,
) -> None:
    async with RedisBroker.from_url(namespace.url(visibility_timeout=1)) as broker:
        await broker.sync_schema()
        stream = broker.settings.stream
        hostile = [b"x", b"-5", b"1e3", b"99999999999", b"\xff", b"2"]
        for i, attempts in enumerate(hostile):
            await broker.client.xadd(stream, {"b": b"%d" % i, "a": attempts})
        await broker.client.xadd(stream, {"b": b"dead", "a": b"1"})
        got = await broker.receive(100, 2)  # one batch: a bad field strands nothing
        assert sorted((d.body, d.attempt) for d in got) == [
            (b"0", 1), (b"1", 1), (b"2", 1), (b"3", 1), (b"4", 1), (b"5", 3), (b"dead", 2)
        ]  # fmt: skip
        for d in got:
            if d.body == b"dead":
                await broker.dead_letter(d, "poison")
        await broker.client.xadd(broker.settings.dead, {"b": b"forged", "n": b"-1", "t": b"inf"})
        letters = await broker.dead_letters()
        assert [(d.body, d.attempts) for d in letters] == [(b"dead", 2), (b"forged", 0)]
        # Reclaimed from a silent consumer: the delivery count is the server's own.
        again = await broker.receive(100, 1 + PROMPT)
        assert sorted((d.body, d.attempt) for d in again)[:2] == [(b"0", 2), (b"1", 2)]


async def test_queue_stats_before_sync_and_with_a_due_retry_change_nothing(
    namespace: RedisNamespace,
) -> None:
    async with RedisBroker.from_url(namespace.url()) as broker:
        await broker.requeue(b"x")  # no consumer group yet: nothing can be held
        assert await broker.queue_stats() == QueueStats(1, 0, 0, 0, 0, delayed=0, retries=0)
        await broker.sync_schema()
        [delivery] = await broker.receive(1, 2)
        await broker.retry(delivery, 0)  # due at once; no receive has moved it back
        stats = await broker.queue_stats()
        assert (stats.ready, stats.reserved, stats.scheduled) == (1, 0, 0)
        assert await broker.client.zcard(broker.settings.delayed) == 1  # not promoted
        assert (await broker.receive(1, 2))[0].body == delivery.body


async def test_queue_stats_count_consumers_seen_within_twice_the_visibility_timeout(
    namespace: RedisNamespace,
) -> None:
    url = namespace.url(visibility_timeout=0.5)  # a 1 s window
    async with RedisBroker.from_url(url) as watcher, RedisBroker.from_url(url) as worker:
        await watcher.sync_schema()
        await watcher.enqueue("job")
        assert await worker.receive(1, 2)  # then silent, as if it had crashed
        # Every server shows the window when told to count (a delivery restarts idle):
        assert (await redis_stats.read(watcher._run, watcher.settings, seen_since=0)).consumers == 1
        version = (await watcher.client.info("server"))["redis_version"]
        counts = tuple(map(int, version.split(".")[:2])) >= (7, 2)
        assert (await watcher.queue_stats()).consumers == (1 if counts else None)
        await asyncio.sleep(1.2)
        assert (await redis_stats.read(watcher._run, watcher.settings, seen_since=0)).consumers == 0
        assert (await watcher.queue_stats()).consumers == (0 if counts else None)


async def test_callers_beyond_max_connections_wait_for_one(namespace: RedisNamespace) -> None:
    """Two connections, one held by a blocked receive: forty enqueues and their acks
    share the other, none fails, and the pool never opens a third."""
    async with RedisBroker.from_url(namespace.url(max_connections=2)) as broker:
        await broker.sync_schema()
        pool = broker.client.connection_pool
        waiting = asyncio.ensure_future(broker.receive(1, 2.0))
        ids = await asyncio.gather(*(broker.enqueue("job", n=n) for n in range(40)))
        assert len(set(ids)) == 40
        [first] = await waiting
        rest = [first]
        while len(rest) < 40:
            got = await broker.receive(40, PROMPT)
            assert got, "the enqueued jobs did not all arrive"
            rest += got
        await asyncio.gather(*(broker.ack(d) for d in rest))
        assert len(pool._in_use_connections) + len(pool._available_connections) <= 2
        assert (await broker.queue_stats()).ready == 0


async def test_a_connection_that_fails_to_open_gives_its_slot_back() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    pool = WaitingPool.from_url(f"redis://127.0.0.1:{port}/0", max_connections=1)
    for _ in range(3):  # a slot kept by a failed attempt would make the next one wait
        with pytest.raises(RedisConnectionError):
            async with asyncio.timeout(5):
                await pool.get_connection()


async def test_the_acks_of_one_loop_pass_share_a_script_call_each_with_its_own_answer(
    namespace: RedisNamespace,
) -> None:
    async with RedisBroker.from_url(namespace.url(visibility_timeout=60)) as broker:
        await broker.sync_schema()
        for n in range(4):
            await broker.enqueue("job", n=n)
        settled, fresh, other, reclaimed = await broker.receive(4, 2)
        await broker.ack(settled)
        s = broker.settings
        await broker.client.xclaim(s.stream, s.group, "elsewhere", 0, [reclaimed.handle.id])
        calls: list[str] = []
        run = broker._run

        async def counted(name: str, keys: list[str], args: list[object]) -> object:
            calls.append(name)
            return await run(name, keys, args)

        broker._run = counted  # type: ignore[method-assign]
        got = await asyncio.gather(
            *(broker.ack(d) for d in (settled, fresh, other, reclaimed)), return_exceptions=True
        )
        assert got[:3] == [None, None, None]
        assert isinstance(got[3], DeliveryLostError)
        assert calls == ["ACK"]
        [(left, _)] = await broker.client.xrange(s.stream)
        assert left.decode() == reclaimed.handle.id  # acked entries are gone, its is not
        pending = await broker.client.xpending_range(s.stream, s.group, "-", "+", 10)
        assert [(p["message_id"], p["consumer"]) for p in pending] == [(left, b"elsewhere")]
        await broker.enqueue("job", n=5)
        [later] = await broker.receive(1, 2)
        await broker.ack(later)
        assert calls.count("ACK") == 2

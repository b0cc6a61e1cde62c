"""A RabbitMQ node the tests start themselves (with the management API): policies, the
delivery-limit backstop, TLS, and what the dedup cache keeps across a restart."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import aio_pika
import pytest

from framework_m_core import decode_message
from framework_m_core.errors import BrokerError
from framework_m_core.testing.scenarios import RECORDER_APP
from framework_m_rabbitmq import RabbitBroker, wire
from framework_m_rabbitmq.management import ManagementAPI
from framework_m_rabbitmq.testing import RabbitNamespace

from .brokers import RabbitServer
from .conftest import REPO

pytestmark = pytest.mark.slow


@pytest.fixture
def node(rabbit_node: RabbitServer) -> RabbitServer:
    return rabbit_node


def url_on(node: RabbitServer, **options: object) -> str:
    return RabbitNamespace(node.url, management=node.management_url).url(**options)


def management_put(node: RabbitServer, path: str, body: dict[str, object]) -> None:
    request = urllib.request.Request(
        f"{node.management_url}/api/{path}", data=json.dumps(body).encode(), method="PUT"
    )
    request.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    request.add_header("Content-Type", "application/json")
    urllib.request.urlopen(request, timeout=10).close()


def test_tls_and_a_vhost_of_its_own(node: RabbitServer) -> None:
    vhost = f"fmtest_{uuid.uuid4().hex[:8]}"
    management_put(node, f"vhosts/{vhost}", {})
    management_put(
        node, f"permissions/{vhost}/guest", {"configure": ".*", "write": ".*", "read": ".*"}
    )
    ca = node.dir / "ca.pem"
    server = f"amqps://guest:guest@127.0.0.1:{node.tls_port}/{vhost}"
    url = f"{server}?queue=fmtest_tls&cafile={ca}&management={node.management_url}"

    async def scenario() -> None:
        async with RabbitBroker.from_url(url) as broker:
            await broker.sync_schema()
            job_id = await broker.enqueue("over_tls", deduplication_id="tick:over_tls:1")
            [delivery] = await broker.receive(1, 10)
            assert job_id.encode() in delivery.body
            await broker.ack(delivery)
        policy = await ManagementAPI(node.management_url, url).get_policy("framework-m.fmtest_tls")
        assert policy is not None  # in the URL's vhost, where the queue is
        assert (
            await ManagementAPI(node.management_url, node.url).get_policy("framework-m.fmtest_tls")
            is None
        )  # not in "/"
        unverified = url.replace(f"cafile={ca}&", "")
        with pytest.raises(BrokerError, match="cannot connect to amqps://guest:\\*\\*\\*@"):
            await RabbitBroker.from_url(unverified).connect()  # the test CA is not trusted

    asyncio.run(scenario())


def test_a_job_the_broker_refuses_is_an_error_not_a_duplicate(node: RabbitServer) -> None:
    """A full queue with overflow reject-publish answers basic.nack; counting that as a
    duplicate would drop the job without a word."""
    url = url_on(node)
    queue = url.split("queue=")[1].split("&")[0]
    management_put(
        node,
        f"policies/%2F/fmtest-full-{queue}",
        {
            "pattern": f"^{queue}\\.jobs$",
            "definition": {"max-length": 1, "overflow": "reject-publish"},
            "apply-to": "queues",
            "priority": 99,
        },
    )

    async def scenario() -> tuple[str, int]:
        async with RabbitBroker.from_url(url) as broker:
            await broker.sync_schema()
            await broker.enqueue("fits", deduplication_id="tick:fits:1")
            deadline = time.monotonic() + 10  # until the policy reaches the queue
            while time.monotonic() < deadline:
                try:
                    await broker.enqueue("overflows", deduplication_id=uuid.uuid4().hex)
                except BrokerError as exc:
                    return str(exc), broker.stats.duplicates
                await asyncio.sleep(0.1)
            raise AssertionError("the full queue never refused a job")

    error, duplicates = asyncio.run(scenario())
    assert "refused the job" in error
    assert duplicates == 0


def test_delivery_limit_lives_in_a_policy_updated_in_place(node: RabbitServer) -> None:
    url = url_on(node, delivery_limit=3)
    queue = url.split("queue=")[1].split("&")[0]
    api = ManagementAPI(node.management_url, node.url)

    async def scenario() -> None:
        async with RabbitBroker.from_url(url) as broker:
            plan = await broker.sync_schema(dry_run=True)
            assert f"create policy framework-m.{queue}: delivery-limit 3" in plan.describe()
            assert await api.get_policy(f"framework-m.{queue}") is None  # a dry run
            await broker.sync_schema()
            assert (await broker.plan_schema()).in_sync
            job_id = await broker.enqueue("queued_before", n=1)
        policy = await api.get_policy(f"framework-m.{queue}")
        assert policy is not None
        assert policy.definition == {"delivery-limit": 3}
        assert policy.pattern == f"^{queue}\\.jobs$"

        changed = url.replace("delivery_limit=3", "delivery_limit=7")
        async with RabbitBroker.from_url(changed) as broker:
            plan = await broker.plan_schema()
            assert [str(c) for c in plan.changes] == [
                f"update policy framework-m.{queue}: delivery-limit 3 -> 7"
            ]
            await broker.sync_schema()
            assert (await broker.plan_schema()).in_sync
            [delivery] = await broker.receive(1, 10)  # queued before the change, still there
            assert job_id.encode() in delivery.body
            await broker.ack(delivery)
        policy = await api.get_policy(f"framework-m.{queue}")
        assert policy is not None
        assert policy.definition == {"delivery-limit": 7}

    asyncio.run(scenario())


def test_delivery_limit_dead_letters_a_job_that_never_gets_an_outcome(
    node: RabbitServer,
) -> None:
    """A job that kills its worker every time is returned to the queue again and again;
    past the delivery limit RabbitMQ moves it to the dead queue by itself."""

    async def scenario() -> tuple[list[int], list[str], list[int]]:
        async with RabbitBroker.from_url(url_on(node, delivery_limit=2)) as broker:
            await broker.sync_schema()
            await broker.enqueue("crasher")
            attempts: list[int] = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                # A worker that takes the job and dies: its connection goes, unsettled.
                connection = await aio_pika.connect(node.url)
                channel = await connection.channel()
                queue = await channel.get_queue(broker.settings.jobs)
                msg = await queue.get(no_ack=False, fail=False, timeout=2)
                if msg is not None:
                    attempts.append(wire.attempt(msg.headers))
                await connection.close()
                if msg is None:
                    break
            dead = await broker.dead_letters()
            return attempts, [d.reason for d in dead], [d.attempts for d in dead]

    attempts, reasons, counts = asyncio.run(scenario())
    assert attempts == [1, 2, 3]
    assert len(reasons) == 1
    assert "delivery-limit" in reasons[0]
    assert counts == [3]


def test_management_api_out_of_reach_is_named_with_the_command_to_run(
    node: RabbitServer,
) -> None:
    url = RabbitNamespace(node.url).url(management="http://127.0.0.1:9")

    async def scenario() -> str:
        async with RabbitBroker.from_url(url) as broker:
            return (await broker.sync_schema()).describe()

    described = asyncio.run(scenario())
    [warning] = [line for line in described.splitlines() if line.startswith("warning: ")]
    assert "policy" not in described.replace(warning, "")  # nothing claimed that was not done
    assert "cannot reach the management API at http://127.0.0.1:9" in warning
    assert "rabbitmqctl set_policy" in warning
    assert ":guest@" not in warning


def test_dedup_survives_a_broker_restart_only_on_disk(node: RabbitServer) -> None:
    """Why the exchange's cache persists on disk by default: a replica whose publish of a
    slot failed during a restart retries it afterwards, and must still meet a duplicate.
    Both caches go through the same restart."""
    urls = {p: url_on(node, cache_persistence=p) for p in ("disk", "memory")}

    async def enqueue(url: str) -> tuple[str, int]:
        async with RabbitBroker.from_url(url) as broker:
            await broker.sync_schema()
            job_id = await broker.enqueue("tick", deduplication_id="tick:tick:1700000000")
            return job_id, broker.stats.duplicates

    before = {p: asyncio.run(enqueue(url)) for p, url in urls.items()}
    assert [d for _, d in before.values()] == [0, 0]
    node.stop()
    node.start()
    after = {p: asyncio.run(enqueue(url)) for p, url in urls.items()}
    assert {p: after[p][0] == before[p][0] for p in urls} == {"disk": True, "memory": True}
    assert {p: after[p][1] for p in urls} == {"disk": 1, "memory": 0}  # memory forgot


def test_a_delayed_job_waiting_in_a_bucket_arrives_after_a_broker_restart(
    node: RabbitServer,
) -> None:
    url = url_on(node, cache_persistence="disk")

    async def delay() -> tuple[str, float]:  # a delayed job goes round a bucket
        async with RabbitBroker.from_url(url) as broker:
            await broker.sync_schema()
            job_id = await broker.enqueue_in(6, "later")
            assert await broker.receive(10, 1.0) == []  # not due: it went to wait
            assert (await broker.queue_stats()).scheduled == 1
            return job_id, time.time() + 5

    async def delayed_arrives() -> tuple[str, int, bool]:
        async with RabbitBroker.from_url(url) as broker:
            [delivery] = await broker.receive(10, 15)
            return decode_message(delivery.body).id, delivery.attempt, time.time() >= due

    delayed, due = asyncio.run(delay())
    node.stop()
    node.start()  # with the README's dead_letter_worker_publisher_confirm_timeout
    assert asyncio.run(delayed_arrives()) == (delayed, 1, True)  # kept, not early


def test_a_broker_without_the_exchange_type_stops_the_worker_naming_the_plugins(
    tmp_path: Path,
) -> None:
    bare = RabbitServer(tmp_path, plugins=())
    bare.start()
    try:
        url = RabbitNamespace(bare.url).url()
        results = [
            subprocess.run(
                [sys.executable, "-m", "framework_m_core", *command, "--broker", url],
                cwd=REPO,
                env={**os.environ, "FM_SLOT_LOG": str(tmp_path / "slots.log")},
                capture_output=True,
                text=True,
                timeout=60,
            )
            for command in (
                ["sync-schema", "--dry-run"],
                ["worker", "--app", RECORDER_APP],
            )
        ]
    finally:
        bare.stop()
    dry_run, worker = results
    assert "refuse exchange" in dry_run.stdout + dry_run.stderr
    assert worker.returncode != 0
    for result in results:
        said = result.stdout + result.stderr
        assert "no exchange type 'x-message-deduplication'" in said
        assert "rabbitmq-message-deduplication" in said
        assert "python -m framework_m_rabbitmq.plugin build" in said
        assert "Traceback" not in said
    assert "no exchange type 'x-fm-store'" in dry_run.stdout + dry_run.stderr
    assert "store=off" in dry_run.stdout + dry_run.stderr


def test_a_missing_configure_permission_is_named_not_taken_for_a_conflict(
    node: RabbitServer,
) -> None:
    user = f"fmtest_{uuid.uuid4().hex[:8]}"
    management_put(node, f"users/{user}", {"password": "pw", "tags": ""})
    management_put(
        node, f"permissions/%2F/{user}", {"configure": "^$", "write": ".*", "read": ".*"}
    )
    ns = RabbitNamespace(node.url)
    admin_url = ns.url()
    limited_url = admin_url.replace("guest:guest@", f"{user}:pw@")

    async def scenario() -> None:
        async with RabbitBroker.from_url(limited_url) as limited:
            with pytest.raises(BrokerError, match="lacks the configure permission") as raised:
                await limited.sync_schema()  # nothing exists yet: it would create
            assert "delete" not in str(raised.value)
            async with RabbitBroker.from_url(admin_url) as admin:
                await admin.sync_schema()
            plan = await limited.plan_schema()  # it exists: its arguments cannot be checked
            assert plan.in_sync  # nothing to change that this user could see: it may start
            [warning] = plan.warnings  # one, naming everything it could not check
            assert "lacks the configure permission" in warning
            assert "nothing needs deleting" in warning
            assert f"queue {limited.settings.queue}.retry.100," in warning
            await limited.sync_schema()  # a worker's start: nothing to do
            await limited.enqueue("job")  # publishing needs write only
            [delivery] = await limited.receive(10, 5)
            await limited.retry(delivery, 0.1)  # into a bucket schema sync declared
            [again] = await limited.receive(10, 5)
            assert again.attempt == 2
            await limited.ack(again)

    try:
        asyncio.run(scenario())
    finally:
        node.ctl("delete_user", user)
        asyncio.run(ns.drop())

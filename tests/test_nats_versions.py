"""A 3-node NATS cluster of the tests' own with an R3 stream, where a clustered stream
may answer a publisher "duplicate message id is in process" (error 10158, servers
2.11 and newer): every caller of a raced id gets the one stored job's id.

Run against the nats-server of ``M_TEST_NATS_SERVER`` (``.ci/matrix``: 2.15); on an older
server the answer never comes, and the test that forces it is skipped.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from framework_m_core import BatchJob, decode_message
from framework_m_core.testing import receive_all
from framework_m_nats import NatsBroker
from framework_m_nats.testing import NatsNamespace

from .brokers import NATS_SERVER, NatsServer, nats_cluster

pytestmark = pytest.mark.slow

IN_PROCESS = "still being stored (10158)"


def server_version() -> tuple[int, ...]:
    text = subprocess.run([NATS_SERVER, "--version"], capture_output=True, text=True).stdout
    return tuple(int(p) for p in text.strip().split("v")[-1].split(".")[:2])


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[NatsServer]]:
    nodes = nats_cluster(tmp_path, 3)
    for node in nodes:
        node.start()
    yield nodes
    for node in nodes:
        node.stop(signal.SIGKILL)


async def synced_broker(url: str) -> NatsBroker:
    """A connected broker whose R3 stream exists, once the fresh cluster has a leader."""
    deadline = time.monotonic() + 60
    while True:
        broker = NatsBroker.from_url(url)
        try:
            await broker.connect()
            await broker.sync_schema()
            return broker
        except Exception:
            await broker.close()
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


def test_racing_publishers_on_an_r3_stream_store_each_id_once(
    cluster: list[NatsServer], caplog: pytest.LogCaptureFixture
) -> None:
    servers = ",".join(node.url.removeprefix("nats://") for node in cluster)
    url = NatsNamespace(f"nats://{servers}").url(replicas=3)
    ids = [f"tick:race:{i}" for i in range(200)]

    async def scenario() -> tuple[list[list[str]], list[str]]:
        brokers = [await synced_broker(url) for _ in range(6)]
        try:
            answers = await asyncio.gather(
                *(b.enqueue_many([BatchJob("race", {}, i) for i in ids]) for b in brokers)
            )
            stored = [decode_message(d.body).id for d in await receive_all(brokers[0])]
            return answers, stored
        finally:
            for b in brokers:
                await b.close()

    with caplog.at_level(logging.DEBUG, logger="framework_m.nats"):
        answers, stored = asyncio.run(scenario())
    assert len(stored) == len(set(stored)) == len(ids)  # one job per id
    for answer in answers[1:]:
        assert answer == answers[0]  # every caller got the original's id
    assert sorted(answers[0]) == sorted(stored)
    in_process = sum(IN_PROCESS in r.getMessage() for r in caplog.records)
    print(f"'in process' answers: {in_process} of {len(ids) * 5} duplicate publishes")


@pytest.mark.skipif(server_version() < (2, 11), reason="the server never answers 'in process'")
def test_an_id_in_process_gets_the_original_once_it_is_stored(
    cluster: list[NatsServer], caplog: pytest.LogCaptureFixture
) -> None:
    """Forced: with both followers frozen the leader cannot commit the first publish, so
    a second publish of the id is answered 'in process' until they are back."""
    servers = ",".join(node.url.removeprefix("nats://") for node in cluster)
    url = NatsNamespace(f"nats://{servers}").url(replicas=3)

    async def scenario() -> tuple[str, str, int]:
        setup = await synced_broker(url)
        info = (await setup.js.stream_info(setup.settings.stream)).cluster
        await setup.close()
        assert info is not None
        [leader] = [n for n in cluster if n.name == info.leader]
        followers = [n for n in cluster if n is not leader]
        on_leader = url.replace(f"nats://{servers}", leader.url)  # followers will be frozen
        first, second = await synced_broker(on_leader), await synced_broker(on_leader)
        try:
            for node in followers:
                node._signal(signal.SIGSTOP)
            try:
                original = asyncio.create_task(first.enqueue("race", "tick:race:held"))
                await asyncio.sleep(0.05)  # its proposal waits for a quorum
                again = asyncio.create_task(second.enqueue("race", "tick:race:held"))
                # Frozen until one publish was answered 'in process' (and asked again),
                # however slowly the machine sends it.
                deadline = time.monotonic() + 10
                while not any(IN_PROCESS in r.getMessage() for r in caplog.records):
                    if time.monotonic() > deadline:
                        break  # the assertion below says what was missing
                    await asyncio.sleep(0.02)
            finally:
                for node in followers:
                    node._signal(signal.SIGCONT)
            # The followers just came back: the stream may take seconds to serve again.
            return await original, await again, len(await receive_all(first, quiet=5))
        finally:
            await first.close()
            await second.close()

    with caplog.at_level(logging.DEBUG, logger="framework_m.nats"):
        original, again, stored = asyncio.run(scenario())
    assert again == original
    assert stored == 1
    assert any(IN_PROCESS in r.getMessage() for r in caplog.records)


@pytest.mark.skipif(server_version() < (2, 10), reason="servers before 2.10 send no clock")
def test_the_ticker_reads_the_server_clock_from_2_10_on(tmp_path: Path) -> None:
    """The clock check's source on NATS: the time JetStream puts in its API replies."""
    server = NatsServer(tmp_path)
    server.start()

    async def read() -> tuple[float | None, float]:
        broker = await synced_broker(NatsNamespace(server.url).url())
        try:
            return await broker.server_time(), time.time()
        finally:
            await broker.close()

    try:
        clock, now = asyncio.run(read())
    finally:
        server.stop(signal.SIGKILL)
    assert clock is not None
    assert abs(clock - now) < 2  # the same machine's clock

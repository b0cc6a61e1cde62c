"""The blocking client from plain ``def`` code, over Redis: typed handles checked before
anything is sent, statuses, results and cancels, and how it closes."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from framework_m_core import (
    App,
    BrokerError,
    ConfigurationError,
    InvalidJobError,
    JobContext,
    JobFailedError,
    JobState,
    SyncClient,
    connect_sync,
)
from framework_m_core.testing import namespace, worker_in_a_thread

SERVER = "redis://127.0.0.1:6379/0"

app = App()


@app.job
async def add(ctx: JobContext, a: int, b: int) -> int:
    return a + b


@app.job(max_attempts=1)
async def fails(ctx: JobContext) -> None:
    raise RuntimeError("fails on purpose")


@pytest.fixture
def url() -> Iterator[str]:
    ns = namespace(SERVER)
    try:
        yield ns.url()
    finally:
        asyncio.run(ns.drop())


@pytest.fixture
def client(url: str) -> Iterator[SyncClient]:
    with connect_sync(url, sync_schema=True) as c:
        yield c


def test_a_handle_enqueues_waits_for_its_result_and_checks_arguments_first(
    client: SyncClient, url: str
) -> None:
    with pytest.raises(InvalidJobError, match="'c'"):
        add.enqueue_sync(client, a=1, b=2, c=3)  # type: ignore[call-arg]
    job = add.enqueue_sync(client, 1, b=2)
    assert job.status_sync().state is JobState.QUEUED
    later = add.enqueue_in_sync(client, 600, a=5, b=6)
    assert later.status_sync().state is JobState.SCHEDULED
    at = add.enqueue_at_sync(client, time.time() + 600, a=7, b=8)
    assert (at.status_sync().due_at or 0) > time.time() + 500
    assert later.cancel_sync() is True
    failing = fails.enqueue_sync(client)
    with worker_in_a_thread(app, url):
        assert job.result_sync(timeout=20) == 3
        with pytest.raises(JobFailedError, match="fails on purpose"):
            failing.result_sync(timeout=20)
    assert later.status_sync().state is JobState.CANCELLED
    assert client.job(job).result_sync(timeout=0) == 3  # an id from elsewhere
    stored = client.run(lambda b: b.queue_stats(), "counting")
    # the two held ones wait; only fails is dead: the refused enqueue sent nothing
    assert (stored.ready, stored.scheduled, stored.dead_letters) == (0, 2, 1)


def test_enqueue_by_name_and_its_errors_are_the_async_ones(client: SyncClient) -> None:
    job = client.enqueue("add", a=1, b=2)
    assert client.status(job).job_name == "add"
    with pytest.raises(InvalidJobError):
        client.enqueue("bad name!")
    with pytest.raises(InvalidJobError):
        client.status("not an id")
    assert client.enqueue_in(60, "add", "dedup-1", a=1, b=1) == client.enqueue_in(
        60, "add", "dedup-1", a=1, b=1
    )


def test_a_close_waits_for_calls_under_way_says_so_and_later_calls_raise(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = connect_sync(url)
    said: list[object] = []
    started = threading.Event()

    async def slow(broker: object) -> str:
        started.set()
        await asyncio.sleep(0.5)
        return "finished"

    thread = threading.Thread(target=lambda: said.append(client.run(slow, "sleeping")))
    thread.start()
    assert started.wait(5)
    client.close(timeout=0.1)
    thread.join(5)
    assert said == ["finished"]  # its own loop and connection: it ran to its end
    assert "1 call(s) still under way in other threads" in caplog.text
    with pytest.raises(BrokerError, match="is closed"):
        client.enqueue("add", a=1, b=2)
    client.close()  # again: nothing


def test_a_thread_per_request_leaves_no_connection_behind(url: str) -> None:
    with connect_sync(url, sync_schema=True) as client:
        for n in range(5):  # a server that starts a thread per request
            thread = threading.Thread(target=client.enqueue, args=("add",), kwargs={"a": n, "b": 1})
            thread.start()
            thread.join(10)
        assert len(client._links) <= 2  # this thread's, and the last request's
        closed = [link for link in client._links if link.loop.is_closed()]
        assert closed == []
        assert client._sync_schema is False  # synced by the first connection only


def test_bad_urls_unreachable_brokers_memory_and_calls_from_async_code_are_refused(
    client: SyncClient,
) -> None:
    with pytest.raises(ConfigurationError):
        connect_sync("redis://127.0.0.1:6379/0?nonsense=1")
    with pytest.raises(ConfigurationError, match="timeout"):
        connect_sync(SERVER, timeout=0)
    with pytest.raises(BrokerError):
        connect_sync("redis://127.0.0.1:1/0", timeout=5)

    with pytest.raises(ConfigurationError, match="memory:// lives in one event loop"):
        connect_sync("memory://")

    async def inside() -> None:
        client.status("0" * 32)

    with pytest.raises(RuntimeError, match="from async code would block its event loop"):
        asyncio.run(inside())

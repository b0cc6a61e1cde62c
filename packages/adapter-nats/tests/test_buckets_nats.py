"""Writes into key-value buckets wait out a bucket found before its stream takes writes.

When several connections make a bucket at once, the server lists the new stream (so
the others find it) before it subscribes it to its subjects: a write then meets no
responders. Each test makes that state on purpose: a bucket's stream that holds
none of its keys' subjects yet, given them while the write is being asked again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine

import nats
import pytest
from nats.js.api import StreamConfig

from framework_m_core.control.shared import shared
from framework_m_core.ports.store import Write as StoreWrite
from framework_m_core.testing import wait_until
from framework_m_nats import NatsBroker
from framework_m_nats.testing import NatsNamespace

pytestmark = pytest.mark.anyio

Write = Callable[[NatsBroker], Coroutine[None, None, object]]
Check = Callable[[NatsBroker], Awaitable[bool]]


async def _any_write(b: NatsBroker) -> object:
    return await b.store.write([StoreWrite("k", b"v")])  # one publish


async def _create(b: NatsBroker) -> object:
    return await shared(b).write_state("k", b"v", version=None)  # one publish, no entry expected


async def _claim(b: NatsBroker) -> object:
    return await shared(b).acquire_lease("k", "me", 30)  # read, then a compare-and-set


async def _memo_write(b: NatsBroker) -> object:
    return await shared(b).put_memo("k", b"v", ttl=30, create=True)  # the memo bucket


async def _memo_check(b: NatsBroker) -> bool:
    return await shared(b).get_memo("k") == b"v"


async def _any_check(b: NatsBroker) -> bool:
    (record,) = await b.store.read(["k"])
    return record is not None and record.value == b"v"


async def _state_check(b: NatsBroker) -> bool:
    entry = await shared(b).read_state("k")
    return entry is not None and entry.value == b"v"


async def _lease_check(b: NatsBroker) -> bool:
    return list(await shared(b).lease_holders("k")) == ["me"]


@pytest.mark.parametrize(
    ("suffix", "write", "check"),
    [
        ("store", _any_write, _any_check),
        ("store", _create, _state_check),
        ("store", _claim, _lease_check),
        ("memos", _memo_write, _memo_check),
    ],
)
async def test_a_write_waits_for_a_bucket_stream_to_take_its_subjects(
    broker: NatsBroker,
    namespace: NatsNamespace,
    caplog: pytest.LogCaptureFixture,
    suffix: str,
    write: Write,
    check: Check,
) -> None:
    bucket = f"{namespace.name}_{suffix}"
    nc = await nats.connect(namespace.server)
    try:
        js = nc.jetstream()
        config = StreamConfig(
            name=f"KV_{bucket}",
            subjects=[f"$KV.{bucket}.none"],  # a bucket no key's write reaches
            max_msgs_per_subject=1,
        )
        await js.add_stream(config)
        caplog.set_level(logging.DEBUG, logger="framework_m.nats")
        writing = asyncio.create_task(write(broker))

        def asked_again() -> bool:
            assert not writing.done() or writing.exception() is None, writing.exception()
            return "no stream answered a bucket write yet" in caplog.text

        await wait_until(asked_again, what="the write asked again")
        config.subjects = [f"$KV.{bucket}.>"]
        await js.update_stream(config)
        assert await writing
        assert await check(broker)
    finally:
        await nc.close()


async def test_a_bucket_whose_opening_timed_out_is_opened_by_asking_again(
    namespace: NatsNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a loaded cluster making a replicated bucket can outlast one request."""
    async with NatsBroker.from_url(namespace.url()) as broker:
        await broker.sync_schema()
        js = broker.js
        create, timeouts = js.create_key_value, []

        async def slow(**config: object) -> object:
            if not timeouts:
                timeouts.append(config["bucket"])
                raise nats.errors.TimeoutError
            return await create(**config)  # type: ignore[arg-type]

        monkeypatch.setattr(js, "create_key_value", slow)
        await _any_write(broker)
        assert timeouts == [f"{broker.settings.stream}_store"]
        assert await _any_check(broker)

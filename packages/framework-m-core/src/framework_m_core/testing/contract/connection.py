"""Contract tests of the broker's lifecycle: connecting, closing, outages, credentials."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

import pytest

from ...adapters.registry import open_broker
from ...errors import BrokerError, ConfigurationError, FrameworkMError
from ...ports.messages import decode_message
from ...ports.protocols import BrokerProtocol
from ..helpers import PROMPT, BrokerFactory, connected, receive_all, wait_until
from ..namespaces import with_address, with_credentials, with_option
from ..proxy import Proxy, free_port
from .base import ContractBase
from .requirements import SINGLE_HOST, requires

# Longest an operation on an unreachable broker may take to fail.
GIVE_UP = 30.0


async def _receive_until_it_fails(broker: BrokerProtocol) -> None:
    """Receive (a buffered consumer may answer from its buffer first) until it raises."""
    for _ in range(10):
        await broker.receive(10, 0.2)


class ConnectionContract(ContractBase):
    """Connect and close, unreachable and vanishing servers, and what never shows."""

    async def test_connect_and_close_are_idempotent(self, broker_factory: BrokerFactory) -> None:
        broker = broker_factory()
        await broker.close()  # never connected
        await broker.connect()
        await broker.connect()
        await broker.sync_schema()
        job_id = await broker.enqueue("job")
        await broker.close()
        await broker.close()
        async with connected(broker_factory) as again:
            [delivery] = await again.receive(10, PROMPT)
            assert decode_message(delivery.body).id == job_id

    async def test_server_time_is_the_brokers_clock_or_none(self, broker: BrokerProtocol) -> None:
        """The test broker runs on this machine: its clock is this one."""
        server_time = getattr(broker, "server_time", None)
        if server_time is None:
            pytest.skip("the adapter has no server_time(): replicas' clocks go unchecked")
        before = time.time()
        theirs = await server_time()
        after = time.time()
        if theirs is not None:
            assert isinstance(theirs, float)
            assert before - 1 <= theirs <= after + 1, "not the broker's wall clock now"

    async def test_io_without_a_connection_raises_broker_error(
        self, broker_factory: BrokerFactory
    ) -> None:
        broker = broker_factory()
        with pytest.raises(BrokerError):
            await broker.enqueue("job")
        await broker.connect()
        await broker.sync_schema()
        await broker.close()
        for call in (
            lambda: broker.enqueue("job"),
            lambda: broker.receive(1, 0.1),
            lambda: broker.plan_schema(),
            lambda: broker.requeue(b"x"),
        ):
            async with asyncio.timeout(PROMPT):
                with pytest.raises(BrokerError):
                    await call()

    async def test_a_bad_url_is_a_configuration_error_naming_it(
        self, broker_factory: BrokerFactory, broker_url: str
    ) -> None:
        adapter = type(broker_factory())
        with pytest.raises(ConfigurationError, match="no_such_option"):
            adapter.from_url(with_option(broker_url, "no_such_option", "1"))
        with pytest.raises(ConfigurationError):
            adapter.from_url("no-such-scheme://127.0.0.1/x")

    @requires(SINGLE_HOST)
    async def test_an_unreachable_server_is_a_broker_error(self, broker_url: str) -> None:
        # Nothing listens there.
        broker = open_broker(with_address(broker_url, f"127.0.0.1:{free_port()}"))
        async with asyncio.timeout(GIVE_UP):
            with pytest.raises(BrokerError):
                await broker.connect()
        await broker.close()

    @requires(SINGLE_HOST)
    async def test_a_lost_server_is_a_broker_error_until_it_is_back(self, broker_url: str) -> None:
        proxy = Proxy(broker_url)
        await proxy.start()
        broker = open_broker(proxy.url)
        try:
            await broker.connect()
            await broker.sync_schema()
            first = await broker.enqueue("job", deduplication_id="tick:job:1")
            await proxy.cut()
            async with asyncio.timeout(GIVE_UP):
                with pytest.raises(BrokerError):
                    await broker.enqueue("job", deduplication_id="tick:job:2")
                with pytest.raises(BrokerError):
                    await _receive_until_it_fails(broker)
            await proxy.start()

            async def enqueued_again() -> bool:
                try:
                    await broker.enqueue("job", deduplication_id="tick:job:2")
                except BrokerError:
                    return False
                return True

            await wait_until(enqueued_again, timeout=GIVE_UP, interval=0.5, what="reconnection")
            ids = [decode_message(d.body).id for d in await receive_all(broker)]
            assert first in ids
            assert len(ids) >= 2
        finally:
            await broker.close()
            await proxy.cut()

    @requires(SINGLE_HOST)
    async def test_credentials_show_in_no_log_repr_or_error(
        self, broker_url: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        secret = f"pw-{uuid.uuid4().hex}"
        broker: BrokerProtocol = open_broker(with_credentials(broker_url, "fmuser", secret))
        shown = [broker.display_url, repr(broker), repr(getattr(broker, "settings", None))]
        with caplog.at_level(logging.DEBUG):
            try:
                async with asyncio.timeout(GIVE_UP):
                    await broker.connect()
                    await broker.sync_schema()
                    await broker.enqueue("job")
            except FrameworkMError as exc:
                shown.append(str(exc))
            finally:
                await broker.close()
        shown += [caplog.text]
        assert not [text for text in shown if secret in text]

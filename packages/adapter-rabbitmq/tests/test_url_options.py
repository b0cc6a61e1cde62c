"""amqp:// URL options: what is accepted, what is refused, and with which message."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pytest

from framework_m_core.errors import ConfigurationError
from framework_m_rabbitmq import RabbitBroker


def test_defaults() -> None:
    broker = RabbitBroker.from_url("amqp://guest:guest@rabbit.example:5672/")
    assert (broker.settings.queue, broker.dedup_window, broker.settings.cache_persistence) == (
        "framework_m",
        120.0,
        "disk",
    )
    assert broker.settings.delivery_limit == 20
    assert broker.settings.management is not None
    assert broker.settings.management.base_url == "http://rabbit.example:15672"
    assert broker.settings.management.vhost == "/"


def test_tls_options_and_the_vhost_reach_the_connection_and_the_management_api(
    tmp_path: Path,
) -> None:
    for name in ("ca.pem", "c.pem", "c.key"):
        (tmp_path / name).touch()
    broker = RabbitBroker.from_url(
        f"amqps://app:s3cret@rabbit.example/jobs%2Fprod?cafile={tmp_path}/ca.pem&heartbeat=30"
        f"&certfile={tmp_path}/c.pem&keyfile={tmp_path}/c.key"
    )
    d = quote(str(tmp_path), safe="")
    assert broker.settings.connection_url == (
        f"amqps://app:s3cret@rabbit.example/jobs%2Fprod?cafile={d}%2Fca.pem&heartbeat=30"
        f"&certfile={d}%2Fc.pem&keyfile={d}%2Fc.key&name=framework-m"
    )
    assert broker.settings.management is not None
    assert broker.settings.management.base_url == "https://rabbit.example:15671"
    assert broker.settings.management.vhost == "jobs/prod"
    assert "s3cret" not in broker.display_url
    assert broker.settings.connect_timeout == 60.0


def test_management_off() -> None:
    assert RabbitBroker.from_url("amqp://h/?management=off").settings.management is None


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("cache_persistence=tape", "cache_persistence must be 'disk' or 'memory'"),
        ("delivery_limit=0", "must be positive"),
        ("cache_size=10000001", "over the exchange's limit of 10,000,000 ids"),
        ("heartbeat=soon", "heartbeat must be whole seconds"),
        ("cafile=/nonexistent/ca.pem", "cafile '/nonexistent/ca.pem' is not a readable file"),
        ("no_verify_ssl=yes", "no_verify_ssl must be 0 or 1"),
        ("queue=a b", "queue must be 1-200 letters"),
        ("management=ftp://h", "management must be an http:// or https:// URL"),
        ("management=http://u:p@h:15672", "must not hold credentials"),
        ("management=ftp://u:p@h", "must not hold credentials"),
        ("colour=blue", "unknown option 'colour'"),
    ],
)
def test_bad_options_are_refused_with_a_message(query: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RabbitBroker.from_url(f"amqp://guest:guest@127.0.0.1/?{query}")


def test_the_connect_timeout_is_taken_by_the_broker_not_left_in_the_url() -> None:
    broker = RabbitBroker.from_url("amqp://h/?timeout=5")
    assert broker.settings.connect_timeout == 5.0
    assert "timeout" not in broker.settings.connection_url


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (b"", "accepted the connection but sent nothing within 1.5s"),
        (b"-ERR unknown command\r\n", "accepted the connection but answered '-ERR unknown"),
        (b"INFO {}\r\n", "answered as a NATS server, not RabbitMQ"),
    ],
)
async def test_a_url_pointed_at_something_else_fails_within_5s_saying_so(
    reply: bytes, said: str
) -> None:
    import asyncio
    import time

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(reply)
        await reader.read()  # hold the connection, as Redis does with a half-sent command
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    started = time.monotonic()
    try:
        with pytest.raises(ConfigurationError, match=r"AMQP server|RabbitMQ") as refused:
            await RabbitBroker.from_url(f"amqp://guest:guest@127.0.0.1:{port}/").connect()
    finally:
        server.close()
    assert time.monotonic() - started < 5
    assert f"127.0.0.1:{port} {said}" in str(refused.value)


def test_a_cluster_url_names_each_node_in_order_with_the_same_credentials_and_vhost() -> None:
    broker = RabbitBroker.from_url(
        "amqp://app:s3cret@10.0.0.1:5673,rabbit-2,[::1]:5674/prod?queue=q&heartbeat=30"
    )
    assert broker.settings.connection_urls == (
        "amqp://app:s3cret@10.0.0.1:5673/prod?heartbeat=30&name=framework-m",
        "amqp://app:s3cret@rabbit-2/prod?heartbeat=30&name=framework-m",
        "amqp://app:s3cret@[::1]:5674/prod?heartbeat=30&name=framework-m",
    )
    assert broker.settings.connection_url == broker.settings.connection_urls[0]
    assert broker.settings.management is not None
    assert broker.settings.management.base_url == "http://10.0.0.1:15672"
    assert "s3cret" not in broker.display_url
    assert broker.node is None  # not connected yet


@pytest.mark.parametrize("hosts", ["h1:5672,", "h1:5672,h2:x", ",h2", "h1:99999"])
def test_a_host_that_is_no_host_port_is_refused(hosts: str) -> None:
    with pytest.raises(ConfigurationError, match="is not a host:port") as raised:
        RabbitBroker.from_url(f"amqp://app:s3cret@{hosts}/")
    assert "s3cret" not in str(raised.value)

from __future__ import annotations

from pathlib import Path

import pytest

from framework_m_core import ConfigurationError
from framework_m_core.adapters.registry import open_broker
from framework_m_nats import NatsBroker, parse_url


def test_defaults() -> None:
    s = parse_url("nats://127.0.0.1")
    assert s.servers == ["nats://127.0.0.1:4222"]
    assert (s.stream, s.dead_letter_stream, s.consumer) == (
        "framework_m_jobs",
        "framework_m_jobs_dead",
        "framework_m_workers",
    )
    assert (s.dedup_window, s.ack_wait, s.replicas) == (120, 30, 1)
    assert s.jobs_subject == "framework_m.jobs"


def test_credentials_and_servers() -> None:
    s = parse_url("nats://alice:s%40cret@n1:4222,n2:4223?stream=jobs&replicas=3")
    assert s.servers == ["nats://n1:4222", "nats://n2:4223"]
    assert (s.user, s.password) == ("alice", "s@cret")
    assert s.replicas == 3
    assert "s%40cret" not in s.display_url
    assert "alice:***@" in s.display_url
    token = parse_url("tls://t0ken@host")
    assert (token.token, token.use_tls, token.servers) == ("t0ken", True, ["tls://host:4222"])
    assert "t0ken" not in token.display_url
    assert parse_url("nats://h?token=abc").token == "abc"
    assert "abc" not in parse_url("nats://h?token=abc").display_url


def test_found_by_scheme() -> None:
    assert isinstance(open_broker("nats://127.0.0.1:4222"), NatsBroker)
    assert isinstance(open_broker("tls://127.0.0.1:4222"), NatsBroker)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("nats://h?dedup_window=300&max_age=60", "max_age (60s) must be at least dedup_window"),
        ("nats://h?replicas=7", "replicas must be 1 to 5"),
        ("nats://h?stream=a.b", "stream 'a.b' must be letters"),
        ("nats://h?subject_prefix=a..b", "subject_prefix"),
        ("nats://h?ack_wait=0", "ack_wait must be at least 0.5"),
        ("nats://h?dedup_window=soon", "must be a float"),
        ("nats://h?colour=blue", "unknown option 'colour'"),
        ("nats://h?creds=/no/such.creds", "creds file '/no/such.creds' does not exist"),
        ("nats://h?stream=x&dead_letter_stream=x", "must differ"),
        ("nats://", "names no server"),
    ],
)
def test_invalid_urls(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_url(url)


def test_tls_key_needs_a_certificate(tmp_path: Path) -> None:
    key = tmp_path / "k.pem"
    key.write_text("x")
    with pytest.raises(ConfigurationError, match="tls_key needs tls_cert"):
        parse_url(f"tls://h?tls_key={key}")


def test_queue_names_the_stream_subjects_and_consumer() -> None:
    s = parse_url("nats://127.0.0.1?queue=orders")
    assert (s.queue, s.stream, s.dead_letter_stream, s.consumer) == (
        "orders",
        "orders_jobs",
        "orders_jobs_dead",
        "orders_workers",
    )
    assert (s.jobs_subject, s.delayed_subject) == ("orders.jobs", "orders.delayed")
    default = parse_url("nats://127.0.0.1")
    named = parse_url("nats://127.0.0.1?queue=framework_m")
    assert (default.stream, default.subject_prefix, default.consumer) == (
        named.stream,
        named.subject_prefix,
        named.consumer,
    )


def test_the_long_options_override_what_queue_derives() -> None:
    s = parse_url("nats://127.0.0.1?queue=orders&stream=ORDERS")
    assert (s.stream, s.subject_prefix, s.consumer) == ("ORDERS", "orders", "orders_workers")


@pytest.mark.parametrize("queue", ["", "a.b", "a b", "x" * 101])
def test_a_queue_name_nats_cannot_carry_is_refused(queue: str) -> None:
    with pytest.raises(ConfigurationError, match=r"queue .* must be 1-100 letters"):
        parse_url(f"nats://127.0.0.1?queue={queue}")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("greeting", "said"),
    [(b"", "sent no greeting within 2s"), (b"-ERR unknown command\r\n", "answered '-ERR unknown")],
)
async def test_a_url_pointed_at_something_else_fails_at_once_saying_so(
    greeting: bytes, said: str
) -> None:
    import asyncio
    import time

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(greeting)
        await reader.read()  # hold the connection as a server that waits for a command
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    started = time.monotonic()
    try:
        with pytest.raises(ConfigurationError, match="not a NATS server") as refused:
            await NatsBroker.from_url(f"nats://127.0.0.1:{port}").connect()
    finally:
        server.close()
    assert time.monotonic() - started < 5
    assert f"127.0.0.1:{port} accepted the connection but {said}" in str(refused.value)

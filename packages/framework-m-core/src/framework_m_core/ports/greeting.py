"""What a server port says first: for adapters that tell their broker from something else
listening on the URL's port, instead of waiting out a client's whole connect timeout."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

# A server that speaks first (NATS) has this long to do so; then the port is sent PING
# and an empty line: Redis answers the PING (+PONG, or -NOAUTH and the like before
# AUTH), and an AMQP server, having read the 8 bytes of a protocol header that is not
# one, answers with the header it speaks and closes the connection.
QUIET = 0.2
PROBE = b"PING\r\n\r\n"
_REDIS = (b"+PONG", b"-NOAUTH", b"-DENIED", b"-WRONGPASS", b"-LOADING", b"-MASTERDOWN")

#: The servers :func:`server_of` tells apart: what a message calls each, and the broker
#: that listens on its port by default.
NATS, REDIS, AMQP = "NATS", "Redis", "AMQP"
_CALLED = {NATS: "a NATS server", REDIS: "a Redis server", AMQP: "an AMQP server"}
_BROKER = {NATS: ("NATS", 4222), REDIS: ("Redis", 6379), AMQP: ("RabbitMQ", 5672)}


@dataclass(frozen=True, slots=True)
class Heard:
    """What a port said: its first bytes (b"" for nothing in time), and the server
    those tell it is, if one of :data:`NATS`, :data:`REDIS` or :data:`AMQP`."""

    said: bytes
    server: str | None

    def quoted(self, wait: float) -> str:
        """What was said, for a message: ``answered '...'``, or that nothing came."""
        text = self.said[:60].decode("ascii", "replace").strip()
        return f"answered {text!r}" if text else f"sent nothing within {wait:g}s"


def server_of(first: bytes) -> str | None:
    """The server whose answer to :data:`PROBE` (or whose greeting) starts with ``first``."""
    if first.startswith(b"INFO "):
        return NATS
    if first.startswith(b"AMQP"):
        return AMQP
    if first.startswith(_REDIS):
        return REDIS
    return None


async def heard_at(host: str, port: int, wait: float) -> Heard | None:
    """Connect to ``host:port``, read what it says at once, else send :data:`PROBE` and
    read its answer, ``wait`` seconds in all. None when the port cannot be reached or
    closes without a word (the client says so itself)."""
    try:
        async with asyncio.timeout(wait):
            reader, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return None
    try:
        first = b""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(QUIET, wait)):
                first = await reader.read(64)
                if not first:
                    return None
        if not first:
            writer.write(PROBE)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(wait - QUIET, QUIET)):
                    first = await reader.read(64)
        return Heard(first, server_of(first))
    except OSError:
        return None
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


def not_the_server(host: str, port: int, heard: Heard | None, wanted: str) -> str | None:
    """The one line that says ``host:port`` answered as another server than ``wanted``
    (:data:`NATS`, :data:`REDIS` or :data:`AMQP`); None when it did not."""
    if heard is None or heard.server is None or heard.server == wanted:
        return None
    broker, usual = _BROKER[wanted]
    return (
        f"{host}:{port} answered as {_CALLED[heard.server]}, not {broker}: is the URL's "
        f"port the one {broker} listens on ({usual} by default)?"
    )

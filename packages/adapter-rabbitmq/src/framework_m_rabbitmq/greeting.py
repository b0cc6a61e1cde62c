"""Whether an ``amqp://`` URL points at an AMQP server, asked only when a connect is slow.

An AMQP server answers the client's protocol header with a ``Connection.Start`` frame
at once. Something else on the port (Redis, NATS, a web server) says nothing or
something else, and the client would wait out its whole connect timeout (60 s by
default). When a connect has not finished after :data:`AFTER` seconds, the port is
asked directly; a wrong answer ends the connect with a clear error.
"""

from __future__ import annotations

from framework_m_core.ports import first_bytes

AFTER = 1.5  # seconds a connect runs before the port is asked
WAIT = 1.5  # seconds the port has to answer the protocol header
_HEADER = b"AMQP\x00\x00\x09\x01"
_METHOD_FRAME = 1


async def problem(host: str, port: int, wait: float = WAIT) -> str | None:
    """Why ``host:port`` is not an AMQP server, or None when it is one (or cannot be
    reached: the client says so itself)."""
    first = await first_bytes(host, port, wait, send=_HEADER)
    if first is None:
        return None
    if first[:1] == bytes([_METHOD_FRAME]) or first.startswith(b"AMQP"):
        return None
    said = first[:60].decode("ascii", "replace").strip()
    heard = f"answered {said!r}" if said else f"sent nothing within {wait:g}s"
    return (
        f"not an AMQP server: {host}:{port} accepted the connection but {heard} to the AMQP "
        "protocol header; is the URL's port the one RabbitMQ listens on (5672 by default)?"
    )

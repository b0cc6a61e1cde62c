"""Whether an ``amqp://`` URL points at an AMQP server, asked when a connect fails or is slow.

An AMQP server answers the client's protocol header with a ``Connection.Start`` frame
at once. Something else on the port says nothing (Redis, waiting for a line), or
something else (NATS greets with INFO), and the client would wait out its whole
connect timeout (60 s by default) or report a garbled frame. When a connect fails or
has not finished after :data:`AFTER` seconds, the port is asked what it is
(:func:`~framework_m_core.ports.heard_at`); another server's answer ends the connect
with a line naming it.
"""

from __future__ import annotations

from framework_m_core.ports import heard_at, not_the_server
from framework_m_core.ports.greeting import AMQP

AFTER = 1.0  # seconds a connect runs before the port is asked
WAIT = 1.5  # seconds the port has to answer


async def problem(host: str, port: int, wait: float = WAIT, *, named: bool = False) -> str | None:
    """Why ``host:port`` is not an AMQP server: another server answered there, or (unless
    ``named``, for a connect that failed rather than hung) something unknown or nothing
    did. None when an AMQP server answered, or the port cannot be reached (the client
    says so itself)."""
    heard = await heard_at(host, port, wait)
    if heard is None or heard.server == AMQP:
        return None
    if (other := not_the_server(host, port, heard, AMQP)) is not None or named:
        return other
    return (
        f"not an AMQP server: {host}:{port} accepted the connection but {heard.quoted(wait)}; "
        "is the URL's port the one RabbitMQ listens on (5672 by default)?"
    )

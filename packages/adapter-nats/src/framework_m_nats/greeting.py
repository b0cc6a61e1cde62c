"""Whether a ``nats://`` URL points at a NATS server at all, found out in a moment.

A NATS server greets every connection with an ``INFO`` line at once. Something else on
the port (Redis, RabbitMQ, a web server) accepts the connection and says nothing, or
something else: nats-py would wait ``connect_timeout`` for the greeting on each of its
rounds, then report a timeout. Reading the first line first, and asking a port that
stays silent what it is (:func:`~framework_m_core.ports.heard_at`), turns that into one
clear error naming what answered instead.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from framework_m_core.ports import ConfigurationError, heard_at, not_the_server
from framework_m_core.ports.greeting import NATS

WAIT = 2.0  # seconds a server that accepted the connection has to greet


async def check(servers: list[str], wait: float = WAIT) -> None:
    """Raise :class:`ConfigurationError` when every server of ``servers`` that accepts a
    connection greets as something other than NATS; servers out of reach are left to the
    client (which tries again, and says so)."""
    wrong: list[str] = []
    for server in servers:
        parts = urlsplit(server)
        host, port = parts.hostname or "", parts.port or 4222
        heard = await heard_at(host, port, wait)
        if heard is None:
            continue  # out of reach
        if heard.server == NATS:
            return
        named = not_the_server(host, port, heard, NATS)
        if named is not None and len(servers) == 1:
            raise ConfigurationError(named)
        said = heard.quoted(wait).replace("sent nothing", "sent no greeting")
        if heard.server is not None:
            said = f"answered as {heard.server}"
        wrong.append(f"{host}:{port} accepted the connection but {said}")
    if wrong:
        raise ConfigurationError(
            f"not a NATS server: {'; '.join(wrong)} (a NATS server sends INFO at once); "
            "is the URL's port the one NATS listens on (4222 by default)?"
        )

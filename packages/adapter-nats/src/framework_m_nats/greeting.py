"""Whether a ``nats://`` URL points at a NATS server at all, found out in a moment.

A NATS server greets every connection with an ``INFO`` line at once. Something else on
the port (Redis, RabbitMQ, a web server) accepts the connection and says nothing, or
something else: nats-py would wait ``connect_timeout`` for the greeting on each of its
rounds, then report a timeout. Checking the first line first turns that into one clear
error within :data:`WAIT` seconds.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from framework_m_core.ports import ConfigurationError, first_bytes

WAIT = 2.0  # seconds a server that accepted the connection has to greet


async def check(servers: list[str], wait: float = WAIT) -> None:
    """Raise :class:`ConfigurationError` when every server of ``servers`` that accepts a
    connection greets as something other than NATS; servers out of reach are left to the
    client (which tries again, and says so)."""
    wrong: list[str] = []
    for server in servers:
        parts = urlsplit(server)
        first = await first_bytes(parts.hostname or "", parts.port or 4222, wait, line=True)
        if first is None:
            continue  # out of reach
        if first.startswith(b"INFO "):
            return
        said = first[:60].decode("ascii", "replace").strip()
        heard = f"answered {said!r}" if said else f"sent no greeting within {wait:g}s"
        wrong.append(f"{parts.hostname}:{parts.port} accepted the connection but {heard}")
    if wrong:
        raise ConfigurationError(
            f"not a NATS server: {'; '.join(wrong)} (a NATS server sends INFO at once); "
            "is the URL's port the one NATS listens on (4222 by default)?"
        )

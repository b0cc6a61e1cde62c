"""``m console``: a page and a JSON API over one broker's fleet, in a process of its own.

Needs the ``console`` extra (``pip install './packages/framework-m-core[console]'``: Starlette and
uvicorn). :func:`serve` runs it until SIGINT or SIGTERM.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Sequence
from typing import Any

from ..adapters.registry import connected
from ..app import App
from ..errors import ConfigurationError
from ..ports.protocols import BrokerProtocol

log = logging.getLogger("framework_m.console")

__all__ = ["available", "serve"]


def available() -> bool:
    """Whether the console's extra is installed."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return False
    return True


async def serve(
    broker: BrokerProtocol,
    app: App | None,
    host: str,
    port: int,
    *,
    change_token: str | None,
    read_token: str | None,
    sample_every: float = 30.0,
    allowed_hosts: Sequence[str] = (),
) -> None:
    """Serve the console on ``host:port`` over ``broker`` (connected here) until stopped.

    Refuses (ConfigurationError) to listen beyond loopback without a change token, and
    tokens shorter than 16 characters. Answers requests for its addresses, localhost,
    ``host`` and ``allowed_hosts`` only (:mod:`.hosts`).
    """
    if not available():
        raise ConfigurationError(
            "m console needs its extra: pip install './packages/framework-m-core[console]' "
            "(Starlette and uvicorn)"
        )
    import uvicorn

    from .auth import Guard
    from .hosts import HostCheck, allowed_names
    from .server import build
    from .views import Views

    guard = Guard(change_token, read_token)
    guard.check_bind(host)
    async with connected(broker):
        hosts = HostCheck(allowed_names([host, *allowed_hosts]))
        asgi = build(Views(broker, app), guard, sample_every=sample_every, hosts=hosts)
        config = uvicorn.Config(
            asgi, host=host, port=port, log_level="warning", access_log=False, lifespan="on"
        )
        server = uvicorn.Server(config)
        _exit_quietly_on_signals(server)
        listening = _listen(host, port)  # refused here, before saying where it listens
        log.info(
            "console on http://%s:%d for %s: changes %s, reads %s",
            host if ":" not in host else f"[{host}]",
            listening.getsockname()[1],
            broker.display_url,
            "need M_CONSOLE_TOKEN" if guard.changes_allowed else "off (no M_CONSOLE_TOKEN)",
            "need a token" if guard.reads_guarded else "open",
        )
        with listening:
            await server.serve(sockets=[listening])
        if server.started is False:
            raise ConfigurationError(f"the console could not listen on {host}:{port}")


def _listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port``; ConfigurationError saying why when it cannot be."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConfigurationError(
            f"the console cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None
    sock.set_inheritable(True)
    return sock


def _exit_quietly_on_signals(server: Any) -> None:
    """SIGINT and SIGTERM stop the server gracefully and the process exits 0: uvicorn
    raises a signal it handled again once it stopped, which then reaches these handlers
    instead of killing the process."""
    if threading.current_thread() is not threading.main_thread():
        return

    def stop(signum: int, frame: Any) -> None:
        server.should_exit = True

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)

"""``m worker --http HOST:PORT``: liveness, readiness and metrics over HTTP.

``GET /healthz`` answers 200 while the event loop runs and the worker's ticker
and consumer are alive (or it is starting), else 503. ``GET /readyz`` answers 200
when the schema is checked, the broker answers and the worker is not shutting
down, else 503 with the reason. ``GET /metrics`` serves Prometheus metrics
when the ``metrics`` extra is installed. The standard library's asyncio streams serve
them: two GET routes need no web framework, and nothing is added to install.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from ..errors import ConfigurationError

log = logging.getLogger("framework_m.http")

_MAX_REQUEST = 8192
_TEXT = "text/plain; charset=utf-8"
_PROMETHEUS = "text/plain; version=0.0.4; charset=utf-8"
Probe = Callable[[], tuple[bool, str]]


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6); ConfigurationError when it is not one."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigurationError(f"--http must be HOST:PORT, e.g. 0.0.0.0:8080, got {text!r}")
    return host, int(port)


class ProbeServer:
    """Serves ``/healthz`` and ``/readyz`` from the given probes."""

    def __init__(
        self,
        host: str,
        port: int,
        liveness: Probe,
        readiness: Probe,
        metrics: Callable[[], Awaitable[bytes]] | None = None,
    ) -> None:
        self.host, self.port = host, port
        self._routes = {"/healthz": liveness, "/readyz": readiness}
        self._metrics = metrics
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._handle, self.host, self.port)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot serve --http {self.host}:{self.port}: {exc}"
            ) from None
        log.info("serving /healthz and /readyz on %s:%d", self.host, self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(5):
                request = await reader.readuntil(b"\r\n\r\n")
            status, body, kind = await self._answer(request[:_MAX_REQUEST])
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            status, body, kind = 400, b"bad request", _TEXT
        except ConnectionError:
            return
        head = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {kind}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        with contextlib.suppress(ConnectionError):
            writer.write(head.encode() + body)
            await writer.drain()
            writer.close()

    async def _answer(self, request: bytes) -> tuple[int, bytes, str]:
        parts = request.split(b"\r\n", 1)[0].split()
        if len(parts) != 3 or parts[0] not in (b"GET", b"HEAD"):
            return 405, b"only GET /healthz, /readyz and /metrics", _TEXT
        path = parts[1].decode("ascii", "replace").split("?", 1)[0]
        if path == "/metrics":
            if self._metrics is None:
                return 404, b"no metrics: pip install prometheus-client", _TEXT
            return 200, await self._metrics(), _PROMETHEUS
        probe = self._routes.get(path)
        if probe is None:
            return 404, b"not found: GET /healthz, /readyz or /metrics", _TEXT
        ok, why = probe()
        return (200 if ok else 503), why.encode(), _TEXT


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            503: "Service Unavailable"}  # fmt: skip

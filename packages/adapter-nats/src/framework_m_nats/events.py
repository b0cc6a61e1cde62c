"""What nats-py tells about its connection, logged for the operator."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client

from .errors import describe

log = logging.getLogger("framework_m.nats")


def callbacks(client: Callable[[], Client | None], display_url: str) -> dict[str, Any]:
    """nats-py's ``error_cb``, ``disconnected_cb`` and ``reconnected_cb``; ``client`` gives
    the broker's client (None while closing: a disconnect then is expected)."""

    async def on_error(exc: Exception) -> None:
        log.warning("nats: %s", describe(exc))

    async def on_disconnected() -> None:
        if client() is not None:
            log.warning("nats: disconnected from %s; reconnecting", display_url)

    async def on_reconnected() -> None:
        nc = client()
        url = nc.connected_url if nc is not None else None
        log.info("nats: reconnected to %s", f"{url.hostname}:{url.port}" if url else "?")

    handlers: dict[str, Callable[..., Awaitable[None]]] = {
        "error_cb": on_error,
        "disconnected_cb": on_disconnected,
        "reconnected_cb": on_reconnected,
    }
    return handlers

"""Find the adapter for a broker URL through the ``framework_m.adapters`` entry points."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from importlib.metadata import EntryPoint, entry_points
from urllib.parse import urlsplit

from ..errors import ConfigurationError, UnknownBrokerError
from ..ports.capabilities import as_capabilities
from ..ports.protocols import BrokerProtocol
from ..ports.urls import redact_url, scheme_of

GROUP = "framework_m.adapters"

# Where the adapter of a scheme that is not installed is: its folder in framework-m's
# repository (the package index's framework-m names belong to another project).
ADAPTER_FOLDERS = {
    "memory": "framework-m-core",
    "nats": "adapter-nats",
    "tls": "adapter-nats",
    "redis": "adapter-redis",
    "rediss": "adapter-redis",
    "redis+sentinel": "adapter-redis",
    "rediss+sentinel": "adapter-redis",
    "amqp": "adapter-rabbitmq",
    "amqps": "adapter-rabbitmq",
}


def install_hint(scheme: str) -> str | None:
    """How to install the adapter of ``scheme``, as the README says; None if unknown."""
    folder = ADAPTER_FOLDERS.get(scheme)
    if folder is None:
        return None
    return f"pip install ./packages/{folder} in a checkout of framework-m's repository"


def installed_schemes() -> dict[str, EntryPoint]:
    """Every scheme an installed adapter registers, with its entry point."""
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def open_broker(url: str) -> BrokerProtocol:
    """An unconnected broker for ``url``; raise :class:`UnknownBrokerError` for unknown schemes."""
    scheme = scheme_of(url)
    available = installed_schemes()
    ep = available.get(scheme)
    if ep is None:
        installed = ", ".join(f"{s}://" for s in sorted(available)) or "none"
        hint = f"; install its adapter: {install}" if (install := install_hint(scheme)) else ""
        raise UnknownBrokerError(
            f"no installed adapter handles {scheme}:// in {redact_url(url)!r} "
            f"(installed: {installed}){hint}"
        )
    try:
        factory = ep.load()
    except Exception as exc:
        raise UnknownBrokerError(
            f"adapter for {scheme}:// ({ep.value}) failed to import: {exc}"
        ) from exc
    if not callable(getattr(factory, "from_url", None)):
        raise ConfigurationError(f"adapter {ep.value} has no from_url(url) classmethod")
    try:
        parts = urlsplit(url)
        if "," not in parts.netloc:  # one host: its port must be a number
            _ = parts.port
        broker = factory.from_url(url)
    except ValueError as exc:  # a URL the standard parser cannot read (a bad port, "[::1")
        raise ConfigurationError(f"broker URL {redact_url(url)!r} is malformed: {exc}") from None
    if not isinstance(broker, BrokerProtocol):
        raise ConfigurationError(f"adapter {ep.value} does not implement BrokerProtocol")
    as_capabilities(broker.capabilities, ep.value)  # an unknown one is an error
    return broker


@contextlib.asynccontextmanager
async def connect(url: str, *, sync_schema: bool = False) -> AsyncIterator[BrokerProtocol]:
    """The broker for ``url``, connected for the ``async with`` block and closed after it:
    how an application (a web app's lifespan, a script) gets a broker to enqueue on.

    With ``sync_schema`` the broker's schema is synced first (that needs the rights
    ``m sync-schema`` needs); otherwise it must exist already, which a worker's start or
    ``m sync-schema`` sees to. Raises :class:`~.errors.ConfigurationError` for a bad URL and
    :class:`~.errors.BrokerError` when the broker cannot be reached.
    """
    broker = open_broker(url)
    async with connected(broker):
        if sync_schema:
            await broker.sync_schema()
        yield broker


@contextlib.asynccontextmanager
async def connected(broker: BrokerProtocol) -> AsyncIterator[BrokerProtocol]:
    """``broker`` connected for the ``async with`` block, closed after it however it ends."""
    await broker.connect()
    try:
        yield broker
    finally:
        await broker.close()

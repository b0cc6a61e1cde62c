"""NATS JetStream broker adapter of framework-m (``nats://`` and ``tls://``)."""

from .broker import NatsBroker
from .settings import NatsSettings, parse_url

__all__ = ["NatsBroker", "NatsSettings", "parse_url"]
